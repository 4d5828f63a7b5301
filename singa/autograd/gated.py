"""Self-gated activations: ``x * g(x)``.

- ``silu(x) = x * sigmoid(x)`` (SiLU, swish with beta 1), computed without overflow for
  large |x|; its gradient is ``s (1 + x (1 - s))`` with s = sigmoid(x).
- ``hardswish(x) = x * clip(x + 3, 0, 6) / 6`` (MobileNetV3's hard swish, ONNX
  HardSwish); its gradient is 0 below -3, ``(2x + 3) / 6`` from -3 to 3 and 1 above
  (PyTorch's choice at the corners: -3 takes the middle piece, 3 too).
- ``mish(x) = x * tanh(softplus(x))`` (ONNX Mish), softplus as ``logaddexp(0, x)`` so
  nothing overflows; its gradient is ``t + x (1 - t^2) sigmoid(x)`` with t =
  tanh(softplus(x)).

float16 inputs are computed in float32 and the result is cast back.
"""

from __future__ import annotations

import numpy as np

from singa.autograd.engine import Operation, check_same_dtype
from singa.device import array_module
from singa.tensor import Tensor

__all__ = ["silu", "hardswish", "mish"]


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


class HardSwish(Operation):
    """y = x * clip(x + 3, 0, 6) / 6; float16 is computed in float32."""

    def forward(self, x):
        xp = array_module(x)
        xc = x.astype(np.float32) if x.dtype.itemsize < 4 else x
        if self.requires_grad:
            self.cache = xc
        return (xc * xp.clip(xc + 3, 0, 6) / 6).astype(x.dtype, copy=False)

    def backward(self, dy):
        x = self.cache
        xp = array_module(x)
        d = xp.where(x < -3, 0, xp.where(x <= 3, (2 * x + 3) / 6, 1)).astype(x.dtype, copy=False)
        return (dy * d).astype(dy.dtype, copy=False)


class Mish(Operation):
    """y = x * tanh(softplus(x)); float16 is computed in float32."""

    def forward(self, x):
        xp = array_module(x)
        xc = x.astype(np.float32) if x.dtype.itemsize < 4 else x
        t = xp.tanh(xp.logaddexp(0, xc))
        if self.requires_grad:
            self.cache = (xc, t)
        return (xc * t).astype(x.dtype, copy=False)

    def backward(self, dy):
        x, t = self.cache
        d = 1 - t * t
        d *= x
        d *= _sigmoid(x)
        d += t
        return (dy * d).astype(dy.dtype, copy=False)


def _check_floating(name: str, x: Tensor) -> None:
    if x.data.dtype.kind != "f":
        check_same_dtype(name, x, floating=True)


def hardswish(x: Tensor) -> Tensor:
    """Hard swish ``x * clip(x + 3, 0, 6) / 6`` (PyTorch's ``hardswish``, ONNX
    HardSwish); floating-point ``x`` only (a ValueError names the dtype)."""
    _check_floating("hardswish", x)
    return HardSwish()(x)[0]


def mish(x: Tensor) -> Tensor:
    """Mish ``x * tanh(softplus(x))`` (PyTorch's ``mish``, ONNX Mish);
    floating-point ``x`` only (a ValueError names the dtype)."""
    _check_floating("mish", x)
    return Mish()(x)[0]


def silu(x: Tensor) -> Tensor:
    """Sigmoid linear unit ``x * sigmoid(x)`` (PyTorch's ``silu``)."""
    _check_floating("silu", x)
    return SiLU()(x)[0]
