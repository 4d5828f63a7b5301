"""Linear algebra: matrix products and bias addition."""

from __future__ import annotations

from singa.autograd.engine import Operation
from singa.tensor import Tensor

__all__ = ["matmul", "add_bias"]


class MatMul(Operation):
    """y = a @ b for 2-D matrices."""

    def forward(self, a, b):
        if self.requires_grad:
            self.cache = (a, b)
        return a @ b

    def backward(self, dy):
        a, b = self.cache
        da = dy @ b.T if self.needs_grad[0] else None
        db = a.T @ dy if self.needs_grad[1] else None
        return da, db


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """Matrix product ``a @ b``."""
    if a.ndim() < 1 or b.ndim() < 1 or a.shape[-1] != b.shape[-2 if b.ndim() > 1 else 0]:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not match")
    return MatMul()(a, b)[0]


class AddBias(Operation):
    """y = x + b, with b broadcast along ``axis`` (0: b is added to every row)."""

    def __init__(self, axis: int = 0):
        super().__init__()
        self.axis = axis

    def forward(self, x, b):
        if self.requires_grad:
            self.cache = b.shape
        if self.axis == 0:
            return x + b.reshape(1, -1)
        return x + b.reshape(-1, 1)

    def backward(self, dy):
        shape = self.cache
        db = dy.sum(axis=self.axis)
        return dy, db.reshape(shape)


def add_bias(x: Tensor, b: Tensor, axis: int = 0) -> Tensor:
    """Add bias ``b`` to every row (axis=0) or every column (axis=1) of matrix ``x``.
    Never modifies ``x``."""
    n = x.shape[1 - axis] if x.ndim() == 2 else -1
    if x.ndim() != 2 or b.size() != n:
        raise ValueError(
            f"add_bias: x of shape {x.shape} and bias of shape {b.shape} do not match (axis={axis})"
        )
    return AddBias(axis)(x, b)[0]
