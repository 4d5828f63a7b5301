"""A multilayer perceptron (SINGA's ``examples/cnn/model/mlp.py``).

Example::

    from singa import zoo
    m = zoo.mlp.MLP(num_classes=10, num_channels=1)   # any input size: flattened
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from singa import autograd, layer
from singa.tensor import Tensor
from singa.zoo.base import Classifier

__all__ = ["MLP", "create_model"]


class MLP(Classifier):
    """Flatten, then ``Linear(h) -> ReLU`` for each hidden size, then
    ``Linear(num_classes)``. Input sizes are taken from the first batch.

    Args:
        num_classes, num_channels, image_size: see :class:`~singa.zoo.base.Classifier`
            (any input shape (N, ...) is accepted and flattened).
        hidden: the hidden layer sizes (SINGA's ``perceptron_size`` is ``hidden=(100,)``).
    """

    def __init__(
        self,
        num_classes: int = 10,
        num_channels: int = 1,
        image_size: Any = None,
        hidden: Sequence[int] = (100,),
    ):
        self.hidden = tuple(int(h) for h in hidden)
        if any(h < 1 for h in self.hidden):
            raise ValueError(f"MLP: hidden sizes must be >= 1, got {hidden!r}")
        super().__init__(num_classes, num_channels, image_size)

    def build(self) -> None:
        """Create the flatten and linear layers."""
        self.flatten = layer.Flatten()
        self.hidden_layers = [layer.Linear(h) for h in self.hidden]
        self.fc = layer.Linear(self.num_classes)

    def _check_input(self, x: Tensor) -> None:
        if x.ndim() < 2:
            raise ValueError(f"MLP: expected input (N, ...), got shape {x.shape}")

    def logits(self, x: Tensor) -> Tensor:
        """Flatten, the hidden layers with ReLU, then the output layer."""
        y = self.flatten(x)
        for fc in self.hidden_layers:
            y = autograd.relu(fc(y))
        return self.fc(y)


def create_model(pretrained: bool = False, **kwargs: Any) -> MLP:
    """An :class:`MLP` (SINGA's factory signature; no pretrained weights exist)."""
    if pretrained:
        raise NotImplementedError("MLP: no pretrained weights are available")
    return MLP(**kwargs)
