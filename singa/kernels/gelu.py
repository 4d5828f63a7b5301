"""Compiled CPU kernels of the exact GELU, ``y = x * Phi(x)``, and its gradient, and of
erf itself (ONNX's ``Erf``: exported GELUs are ``0.5 x (1 + erf(x / sqrt 2))``).

``Phi(x) = erfc(-x / sqrt 2) / 2`` (libm's erfc, through numba) is accurate in the lower
tail, where ``(1 + erf(x / sqrt 2)) / 2`` cancels; each element is computed in float64
and rounded once to the array's dtype. One pass over memory, where the array
expression of :mod:`singa.autograd.activation` (a rational erf in numpy) makes a dozen
passes with temporaries: about 10x faster on the CPU.
"""

from __future__ import annotations

import math

from singa.kernels.jit import kernel

__all__ = ["gelu_exact", "gelu_exact_grad", "erf_values"]

# The forward writes Phi(x) too (into ``cdf``, an input array it fills), so that the
# backward needs one exp per element and no second erfc: erfc is most of the cost.

_SQRT1_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@kernel
def gelu_exact(x, cdf, y):  # pragma: no cover (compiled)
    """y[i] = x[i] * Phi(x[i]); cdf[i] = Phi(x[i]) (float64 inside, rounded once)."""
    for i in range(x.shape[0]):
        v = float(x[i])
        c = 0.5 * math.erfc(-v * _SQRT1_2)
        cdf[i] = c
        y[i] = v * c


@kernel
def gelu_exact_grad(dy, x, cdf, dx):  # pragma: no cover (compiled)
    """dx[i] = dy[i] * (Phi(x[i]) + x[i] * phi(x[i])), Phi from the forward."""
    for i in range(x.shape[0]):
        v = float(x[i])
        dx[i] = dy[i] * (float(cdf[i]) + v * _INV_SQRT_2PI * math.exp(-0.5 * v * v))


@kernel
def erf_values(x, y):  # pragma: no cover (compiled)
    """y[i] = erf(x[i]) (libm's, in float64, rounded once)."""
    for i in range(x.shape[0]):
        y[i] = math.erf(float(x[i]))
