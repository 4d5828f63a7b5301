"""Self-gated activations: ``x * g(x)``.

``silu(x) = x * sigmoid(x)`` (SiLU, swish with beta 1), computed without overflow for
large |x|; its gradient is ``s (1 + x (1 - s))`` with s = sigmoid(x).
"""

from __future__ import annotations

import numpy as np

from singa.autograd.engine import Operation, array_module, check_same_dtype
from singa.tensor import Tensor

__all__ = ["silu"]


def _sigmoid(x):
    """1 / (1 + exp(-x)) without overflow: exp of -|x| only."""
    xp = array_module(x)
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1 / (1 + e), e / (1 + e))


class SiLU(Operation):
    """y = x * sigmoid(x); float16 is computed in float32."""

    def forward(self, x):
        xc = x.astype(np.float32) if x.dtype.itemsize < 4 else x
        s = _sigmoid(xc)
        if self.requires_grad:
            self.cache = (xc, s)
        return (xc * s).astype(x.dtype, copy=False)

    def backward(self, dy):
        x, s = self.cache
        d = 1 - s
        d *= x
        d += 1
        d *= s
        return (dy * d).astype(dy.dtype, copy=False)


def silu(x: Tensor) -> Tensor:
    """Sigmoid linear unit ``x * sigmoid(x)`` (PyTorch's ``silu``)."""
    if x.data.dtype.kind != "f":
        check_same_dtype("silu", x, floating=True)
    return SiLU()(x)[0]
