"""Activation layers: parameter-free layers applying one activation operator."""

from __future__ import annotations

from singa import autograd
from singa.layer.base import Layer
from singa.tensor import Tensor

__all__ = [
    "ReLU",
    "LeakyReLU",
    "Sigmoid",
    "Tanh",
    "SoftMax",
    "GELU",
    "SiLU",
    "HardSwish",
    "Mish",
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


class GELU(Layer):
    """x * Phi(x) (PyTorch's ``nn.GELU``): ``approximate="none"`` exact, ``"tanh"``
    the tanh approximation."""

    def __init__(self, approximate: str = "none", name: str | None = None):
        super().__init__(name)
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        """Apply GELU."""
        return autograd.gelu(x, self.approximate)


class SiLU(Layer):
    """x * sigmoid(x) (PyTorch's ``nn.SiLU``)."""

    def forward(self, x: Tensor) -> Tensor:
        """Apply SiLU."""
        return autograd.silu(x)


class HardSwish(Layer):
    """x * clip(x + 3, 0, 6) / 6 (PyTorch's ``nn.Hardswish``, MobileNetV3's hard swish)."""

    def forward(self, x: Tensor) -> Tensor:
        """Apply hard swish."""
        return autograd.hardswish(x)


class Mish(Layer):
    """x * tanh(softplus(x)) (PyTorch's ``nn.Mish``)."""

    def forward(self, x: Tensor) -> Tensor:
        """Apply Mish."""
        return autograd.mish(x)
