"""Loss layers: parameter-free layers wrapping one loss operator."""

from __future__ import annotations

from singa import autograd
from singa.layer.base import Layer
from singa.tensor import Tensor

__all__ = [
    "SoftMaxCrossEntropy",
    "CrossEntropy",
    "MeanSquareError",
    "BinaryCrossEntropy",
]


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
