"""Parameter-free layers wrapping one operator: activations, shape operators, losses."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from singa import autograd
from singa.layer.base import Layer
from singa.tensor import Tensor

__all__ = [
    "ReLU",
    "LeakyReLU",
    "Sigmoid",
    "Tanh",
    "SoftMax",
    "Flatten",
    "Cat",
    "Add",
    "Reshape",
    "SoftMaxCrossEntropy",
    "CrossEntropy",
    "MeanSquareError",
    "BinaryCrossEntropy",
]


class ReLU(Layer):
    """max(x, 0)."""

    def forward(self, x: Tensor) -> Tensor:
        """Apply ReLU."""
        return autograd.relu(x)


class LeakyReLU(Layer):
    """x where x >= 0, ``a * x`` elsewhere."""

    def __init__(self, a: float = 0.01, name: str | None = None):
        super().__init__(name)
        self.a = float(a)

    def forward(self, x: Tensor) -> Tensor:
        """Apply LeakyReLU."""
        return autograd.leakyrelu(x, self.a)


class Sigmoid(Layer):
    """1 / (1 + exp(-x))."""

    def forward(self, x: Tensor) -> Tensor:
        """Apply the logistic sigmoid."""
        return autograd.sigmoid(x)


class Tanh(Layer):
    """tanh(x)."""

    def forward(self, x: Tensor) -> Tensor:
        """Apply tanh."""
        return autograd.tanh(x)


class SoftMax(Layer):
    """softmax along ``axis`` (default 1, SINGA's)."""

    def __init__(self, axis: int = 1, name: str | None = None):
        super().__init__(name)
        self.axis = int(axis)

    def forward(self, x: Tensor) -> Tensor:
        """Apply softmax."""
        return autograd.softmax(x, self.axis)


class Flatten(Layer):
    """Flatten to a matrix (ONNX Flatten): dims before ``axis`` make the rows."""

    def __init__(self, axis: int = 1, name: str | None = None):
        super().__init__(name)
        self.axis = int(axis)

    def forward(self, x: Tensor) -> Tensor:
        """Flatten ``x``."""
        return autograd.flatten(x, self.axis)


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


class SoftMaxCrossEntropy(Layer):
    """Mean cross-entropy of softmax(x) against class indices or one-hot targets."""

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        """The loss, shape (1,)."""
        return autograd.softmax_cross_entropy(x, t)


class CrossEntropy(Layer):
    """Mean cross-entropy of probabilities ``y`` against targets ``t``."""

    def forward(self, y: Tensor, t: Tensor) -> Tensor:
        """The loss, shape (1,)."""
        return autograd.cross_entropy(y, t)


class MeanSquareError(Layer):
    """Mean squared error between ``x`` and ``t``."""

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        """The loss, shape (1,)."""
        return autograd.mse_loss(x, t)


class BinaryCrossEntropy(Layer):
    """Mean binary cross-entropy of probabilities ``x`` against 0/1 targets ``t``."""

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        """The loss, shape (1,)."""
        return autograd.binary_cross_entropy(x, t)
