"""Shape operators: views, joins, splits and indexing."""

from __future__ import annotations

from typing import Any

from singa.autograd.engine import Operation
from singa.tensor import Tensor

__all__ = ["reshape", "transpose"]


class Reshape(Operation):
    """y = x viewed with a new shape (one entry may be -1, 0 keeps that input dim)."""

    def __init__(self, shape: tuple):
        super().__init__()
        self.shape = tuple(shape)

    def forward(self, x):
        if self.requires_grad:
            self.cache = x.shape
        shape = tuple(x.shape[i] if s == 0 else s for i, s in enumerate(self.shape))
        return x.reshape(shape)

    def backward(self, dy):
        return dy.reshape(self.cache)


def reshape(x: Tensor, shape: Any) -> Tensor:
    """``x`` with a new shape (same number of elements)."""
    return Reshape(shape)(x)[0]


class Transpose(Operation):
    """y = x with its axes permuted (reversed when ``perm`` is None)."""

    def __init__(self, perm: Any = None):
        super().__init__()
        self.perm = None if perm is None else tuple(perm)

    def forward(self, x):
        return x.transpose(self.perm)

    def backward(self, dy):
        if self.perm is None:
            return dy.transpose()
        inv = [0] * len(self.perm)
        for i, p in enumerate(self.perm):
            inv[p] = i
        return dy.transpose(inv)


def transpose(x: Tensor, shape: Any = None) -> Tensor:
    """Permute the axes of ``x`` (SINGA calls the permutation ``shape``)."""
    return Transpose(shape)(x)[0]
