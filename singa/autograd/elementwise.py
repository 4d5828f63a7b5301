"""Elementwise arithmetic with numpy broadcasting; gradients are summed back to each
input's shape."""

from __future__ import annotations

from singa.autograd.engine import Operation, unbroadcast
from singa.tensor import Tensor

__all__ = ["add", "sub", "mul", "div"]


class Add(Operation):
    """y = a + b."""

    def forward(self, a, b):
        if self.requires_grad:
            self.cache = (a.shape, b.shape)
        return a + b

    def backward(self, dy):
        sa, sb = self.cache
        return unbroadcast(dy, sa), unbroadcast(dy, sb)


class Sub(Operation):
    """y = a - b."""

    def forward(self, a, b):
        if self.requires_grad:
            self.cache = (a.shape, b.shape)
        return a - b

    def backward(self, dy):
        sa, sb = self.cache
        return unbroadcast(dy, sa), unbroadcast(-dy, sb)


class Mul(Operation):
    """y = a * b."""

    def forward(self, a, b):
        if self.requires_grad:
            self.cache = (a, b)
        return a * b

    def backward(self, dy):
        a, b = self.cache
        da = unbroadcast(dy * b, a.shape) if self.needs_grad[0] else None
        db = unbroadcast(dy * a, b.shape) if self.needs_grad[1] else None
        return da, db


class Div(Operation):
    """y = a / b."""

    def forward(self, a, b):
        y = a / b
        if self.requires_grad:
            self.cache = (a, b, y)
        return y

    def backward(self, dy):
        a, b, y = self.cache
        g = dy / b
        da = unbroadcast(g, a.shape) if self.needs_grad[0] else None
        db = unbroadcast(-g * y, b.shape) if self.needs_grad[1] else None
        return da, db


def add(a: Tensor, b: Tensor) -> Tensor:
    """a + b with broadcasting."""
    return Add()(a, b)[0]


def sub(a: Tensor, b: Tensor) -> Tensor:
    """a - b with broadcasting."""
    return Sub()(a, b)[0]


def mul(a: Tensor, b: Tensor) -> Tensor:
    """a * b with broadcasting."""
    return Mul()(a, b)[0]


def div(a: Tensor, b: Tensor) -> Tensor:
    """a / b with broadcasting."""
    return Div()(a, b)[0]
