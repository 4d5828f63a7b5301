"""Shape layers: parameter-free layers that reshape or flatten their input."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from singa import autograd
from singa.layer.base import Layer
from singa.tensor import Tensor

__all__ = [
    "Flatten",
    "Reshape",
]


class Flatten(Layer):
    """Flatten to a matrix (ONNX Flatten): dims before ``axis`` make the rows."""

    def __init__(self, axis: int = 1, name: str | None = None):
        super().__init__(name)
        self.axis = int(axis)

    def forward(self, x: Tensor) -> Tensor:
        """Flatten ``x``."""
        return autograd.flatten(x, self.axis)


class Reshape(Layer):
    """Reshape to ``shape`` (given here or to each call: ``Reshape()(x, shape)``, SINGA's
    form); a 0 keeps the input's dim, one -1 is inferred."""

    def __init__(self, shape: Sequence[int] | None = None, name: str | None = None):
        super().__init__(name)
        self.shape = None if shape is None else tuple(shape)

    def forward(self, x: Tensor, shape: Any = None) -> Tensor:
        """``x`` reshaped."""
        shape = self.shape if shape is None else shape
        if shape is None:
            raise ValueError("Reshape: no shape given (pass it to the constructor or to the call)")
        return autograd.reshape(x, shape)
