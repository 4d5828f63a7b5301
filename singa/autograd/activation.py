"""Activation functions."""

from __future__ import annotations

from singa.autograd.engine import Operation
from singa.tensor import Tensor

__all__ = ["relu"]


class ReLU(Operation):
    """y = max(x, 0)."""

    def forward(self, x):
        y = x * (x > 0)
        if self.requires_grad:
            self.cache = x > 0
        return y

    def backward(self, dy):
        return dy * self.cache


def relu(x: Tensor) -> Tensor:
    """Rectified linear unit, max(x, 0)."""
    return ReLU()(x)[0]
