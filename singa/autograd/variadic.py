"""Elementwise operators over any number of tensors (ONNX Max, Min, Sum, Mean).

The inputs broadcast together as numpy does and must share one dtype. Each input's
gradient is summed back to its own shape; with one input ``backward`` returns that
gradient itself (not a 1-tuple), as SINGA's operators do.

``max`` / ``min``: where several inputs tie for the extreme value, the gradient is
shared equally among them (as ``maximum``/``minimum`` split it at ties of two).

Example::

    y = autograd.max(a, b, c)          # elementwise maximum of three tensors
    y = autograd.Sum()(a, b, c)[0]     # SINGA's operator-class form of a + b + c
"""

from __future__ import annotations

from functools import reduce
from typing import Any

import numpy as np

from singa.autograd.engine import Operation, check_same_dtype, unbroadcast
from singa.device import array_module
from singa.tensor import Tensor

__all__ = ["max", "min", "Max", "Min", "Sum", "Mean"]


class _Extreme(Operation):
    """y = the elementwise extreme of the inputs; ties share the gradient."""

    @staticmethod
    def pick(xp: Any) -> Any:
        raise NotImplementedError

    def forward(self, *xs):
        y = reduce(self.pick(array_module(xs[0])), xs)
        if len(xs) == 1:
            y = y.copy()
        if self.requires_grad:
            self.cache = (xs, y)
        return y

    def backward(self, dy):
        xs, y = self.cache
        hits = [x == y for x in xs]
        count = reduce(lambda a, b: a + b, [h.astype(dy.dtype) for h in hits])
        share = dy / count
        dxs = tuple(
            unbroadcast(share * h, x.shape) if need else None for x, h, need in zip(xs, hits, self.needs_grad)
        )
        return dxs if len(dxs) > 1 else dxs[0]


class Max(_Extreme):
    """y = max(x1, x2, ...) elementwise."""

    pick = staticmethod(lambda xp: xp.maximum)


class Min(_Extreme):
    """y = min(x1, x2, ...) elementwise."""

    pick = staticmethod(lambda xp: xp.minimum)


class Sum(Operation):
    """y = x1 + x2 + ... (broadcast)."""

    def forward(self, *xs):
        if self.requires_grad:
            self.cache = [x.shape for x in xs]
        y = reduce(lambda a, b: a + b, xs)
        return y.copy() if len(xs) == 1 else y

    def backward(self, dy):
        dxs = tuple(unbroadcast(dy, s) if n else None for s, n in zip(self.cache, self.needs_grad))
        return dxs if len(dxs) > 1 else dxs[0]


class Mean(Sum):
    """y = (x1 + x2 + ...) / n (broadcast)."""

    def forward(self, *xs):
        y = super().forward(*xs)
        return y / y.dtype.type(len(xs))

    def backward(self, dy):
        return super().backward(dy / dy.dtype.type(len(self.cache)))


def _check(name: str, xs: tuple) -> None:
    if not xs or not all(isinstance(x, Tensor) for x in xs):
        raise TypeError(f"{name}: needs one or more Tensors")
    check_same_dtype(name, *xs)
    try:
        np.broadcast_shapes(*(tuple(x.shape) for x in xs))
    except ValueError:
        shapes = ", ".join(str(x.shape) for x in xs)
        raise ValueError(f"{name}: shapes {shapes} cannot be broadcast together") from None


def max(*xs: Tensor) -> Tensor:
    """Elementwise maximum of one or more tensors of one dtype (broadcast); tied
    inputs share the gradient equally."""
    _check("max", xs)
    return Max()(*xs)[0]


def min(*xs: Tensor) -> Tensor:
    """Elementwise minimum of one or more tensors of one dtype (broadcast); tied
    inputs share the gradient equally."""
    _check("min", xs)
    return Min()(*xs)[0]
