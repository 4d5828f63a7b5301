"""Rounding to whole numbers, elementwise: ceil, floor, round and rounde.

The results keep the input's floating dtype. Each is piecewise constant, so its
gradient is 0 everywhere (SINGA's and PyTorch's convention; the jumps are ignored).

``round`` rounds halves away from zero (SINGA's, C's ``round``: 2.5 -> 3, -2.5 -> -3);
``rounde`` rounds halves to the nearest even number (numpy's and ONNX Round's:
2.5 -> 2, 3.5 -> 4).

Example::

    y = autograd.floor(x)
"""

from __future__ import annotations

from typing import Any

from singa.autograd.engine import Operation, check_same_dtype
from singa.device import array_module
from singa.tensor import Tensor

__all__ = ["ceil", "floor", "round", "rounde", "Ceil", "Floor", "Round", "Rounde"]


class _Rounding(Operation):
    """y = f(x) for a piecewise-constant f; the gradient is zeros of x's shape."""

    @staticmethod
    def f(xp: Any, x: Any) -> Any:
        raise NotImplementedError

    def forward(self, x):
        if self.requires_grad:
            self.cache = (x.shape, x.dtype)
        return self.f(array_module(x), x)

    def backward(self, dy):
        return array_module(dy).zeros(*self.cache)


def _half_away(xp: Any, x: Any) -> Any:
    """Round halves away from zero: trunc(x), moved one away from zero where the
    (exactly computed) fraction is at least a half."""
    t = xp.trunc(x)
    up = xp.abs(x - t) >= 0.5
    return t + xp.sign(x) * up


class Ceil(_Rounding):
    """y = the smallest whole number >= x."""

    f = staticmethod(lambda xp, x: xp.ceil(x))


class Floor(_Rounding):
    """y = the largest whole number <= x."""

    f = staticmethod(lambda xp, x: xp.floor(x))


class Round(_Rounding):
    """y = x rounded to the nearest whole number, halves away from zero."""

    f = staticmethod(_half_away)


class Rounde(_Rounding):
    """y = x rounded to the nearest whole number, halves to even (ONNX Round)."""

    f = staticmethod(lambda xp, x: xp.round(x))


def _apply(op: type, name: str, x: Tensor) -> Tensor:
    check_same_dtype(name, x, floating=True)
    return op()(x)[0]


def ceil(x: Tensor) -> Tensor:
    """Round up to whole numbers (floating tensors)."""
    return _apply(Ceil, "ceil", x)


def floor(x: Tensor) -> Tensor:
    """Round down to whole numbers (floating tensors)."""
    return _apply(Floor, "floor", x)


def round(x: Tensor) -> Tensor:
    """Round to the nearest whole number, halves away from zero (SINGA's round)."""
    return _apply(Round, "round", x)


def rounde(x: Tensor) -> Tensor:
    """Round to the nearest whole number, halves to even (numpy's and ONNX's Round)."""
    return _apply(Rounde, "rounde", x)
