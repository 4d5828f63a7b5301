"""Merging layers: parameter-free layers that join several inputs into one (Keras's name)."""

from __future__ import annotations

from collections.abc import Sequence

from singa import autograd
from singa.layer.base import Layer
from singa.tensor import Tensor

__all__ = [
    "Cat",
    "Add",
]


class Cat(Layer):
    """Concatenate a list of tensors along ``axis`` (``Cat(axis)([a, b])``)."""

    def __init__(self, axis: int = 0, name: str | None = None):
        super().__init__(name)
        self.axis = int(axis)

    def forward(self, xs: Sequence[Tensor]) -> Tensor:
        """Join ``xs``."""
        return autograd.cat(xs, self.axis)


class Add(Layer):
    """Elementwise ``a + b`` (numpy broadcasting)."""

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        """Add the inputs."""
        return autograd.add(a, b)
