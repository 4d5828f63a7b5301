"""Compiled CPU kernels of the exact GELU, ``y = x * Phi(x)``, and its gradient, and of
erf itself (ONNX's ``Erf``: exported GELUs are ``0.5 x (1 + erf(x / sqrt 2))``).

``Phi(x) = erfc(-x / sqrt 2) / 2`` (libm's erfc, through numba) is accurate in the lower
tail, where ``(1 + erf(x / sqrt 2)) / 2`` cancels; each element is computed in float64
and rounded once to the array's dtype. One pass over memory, where the array
expression of :mod:`singa.autograd.activation` (a rational erf in numpy) makes a dozen
passes with temporaries: about 10x faster on the CPU.

float32 arrays take :func:`gelu_float32` and :func:`gelu_float32_grad` instead: libm's
erfc and exp are one call per element (12 and 7 ns), which LLVM cannot vectorise. Those
kernels compute, still in float64, a Chebyshev fit of erfc (relative error below
1.2e-7 over the whole line, the lower tail included) and an exp from a polynomial and
the exponent's bits, both plain arithmetic that LLVM turns into 8-lane AVX-512 code
with fused multiply-adds (``kernel(fused=True)``: half the instructions of a separate
multiply and add): within 2 ulp of the float64 path, at 2.0 and 1.0 ns per element on
one core (3.6 and 1.6 unfused; PyTorch's float32 GELU, which cancels in the lower tail,
0.4 and 0.7).
"""

from __future__ import annotations

import math

import numpy as np

from singa.kernels.jit import helper, kernel

__all__ = ["gelu_exact", "gelu_exact_grad", "gelu_float32", "gelu_float32_grad", "erf_values"]

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


_LOG2E = 1.4426950408889634
_LN2_HI = 0.693147180369123816490  # ln 2 in two parts: k * _LN2_HI is exact for |k| < 2^20
_LN2_LO = 1.90821492927058770002e-10


@helper
def exp_for_float32(a: float) -> float:
    """exp(a) to a relative 1e-9 (enough for a float32 result) for a in [-700, 700]:
    a = k ln 2 + r with |r| <= ln 2 / 2, exp(r) by its Taylor polynomial of degree 8, and
    2^k written into the exponent bits."""
    a = min(max(a, -700.0), 700.0)
    k = math.floor(a * _LOG2E + 0.5)
    r = (a - k * _LN2_HI) - k * _LN2_LO
    p = 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    return p * np.int64((np.int64(k) + 1023) << 52).view(np.float64)


@helper
def erfc_for_float32(u: float) -> float:
    """erfc(u), relative error below 1.2e-7 for every u (Numerical Recipes' Chebyshev
    fit ``erfcc``: t exp(-z^2 + P(t)) with t = 1 / (1 + z / 2), z = |u|)."""
    z = abs(u)
    t = 1.0 / (1.0 + 0.5 * z)
    q = 0.17087277
    q = q * t - 0.82215223
    q = q * t + 1.48851587
    q = q * t - 1.13520398
    q = q * t + 0.27886807
    q = q * t - 0.18628806
    q = q * t + 0.09678418
    q = q * t + 0.37409196
    q = q * t + 1.00002368
    tail = t * exp_for_float32(-z * z - 1.26551223 + t * q)
    return tail if u >= 0.0 else 2.0 - tail


@kernel(fused=True)
def gelu_float32(x, cdf, y):  # pragma: no cover (compiled)
    """:func:`gelu_exact` for float32 arrays, vectorised (within 2 ulp of it)."""
    for i in range(x.shape[0]):
        v = float(x[i])
        c = 0.5 * erfc_for_float32(-v * _SQRT1_2)
        cdf[i] = c
        y[i] = v * c


@kernel(fused=True)
def gelu_float32_grad(dy, x, cdf, dx):  # pragma: no cover (compiled)
    """:func:`gelu_exact_grad` for float32 arrays, vectorised."""
    for i in range(x.shape[0]):
        v = float(x[i])
        dx[i] = dy[i] * (float(cdf[i]) + v * _INV_SQRT_2PI * exp_for_float32(-0.5 * v * v))
