"""The MNIST CNN (SINGA's ``examples/cnn/model/cnn.py``, with 32 and 64 kernels).

Conv(32, 5x5) -> ReLU -> MaxPool(2) -> Conv(64, 5x5) -> ReLU -> MaxPool(2) -> Flatten ->
Linear(500) -> ReLU -> Linear(num_classes). No padding: a 28x28 input gives 64x4x4
features before the first linear layer, a 32x32 input 64x5x5 (the linear layer sizes
itself on the first batch). The smallest input is 16x16.

Example::

    from singa import opt, tensor, zoo
    m = zoo.cnn.CNN(num_classes=10, num_channels=1)
    m.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    m.compile([tx], is_train=True, use_graph=True)
    out, loss = m(tx, ty)
"""

from __future__ import annotations

from typing import Any

from singa import autograd, layer
from singa.tensor import Tensor
from singa.zoo.base import Classifier

__all__ = ["CNN", "create_model"]


class CNN(Classifier):
    """The two-convolution MNIST network.

    Args:
        num_classes, num_channels, image_size: see :class:`~singa.zoo.base.Classifier`.
        kernels: the output channels of the two convolutions.
        hidden: the size of the hidden linear layer.
    """

    def __init__(
        self,
        num_classes: int = 10,
        num_channels: int = 1,
        image_size: Any = None,
        kernels: tuple[int, int] = (32, 64),
        hidden: int = 500,
    ):
        self.kernels = (int(kernels[0]), int(kernels[1]))
        self.hidden = int(hidden)
        super().__init__(num_classes, num_channels, image_size)

    def build(self) -> None:
        """Create the layers."""
        self.conv1 = layer.Conv2d(self.kernels[0], 5, padding=0)
        self.conv2 = layer.Conv2d(self.kernels[1], 5, padding=0)
        self.pooling1 = layer.MaxPool2d(2, 2, padding=0)
        self.pooling2 = layer.MaxPool2d(2, 2, padding=0)
        self.flatten = layer.Flatten()
        self.linear1 = layer.Linear(self.hidden)
        self.linear2 = layer.Linear(self.num_classes)

    def _check_input(self, x: Tensor) -> None:
        super()._check_input(x)
        if x.ndim() != 4 or min(x.shape[2:]) < 16:
            raise ValueError(f"CNN: expected images (N, C, H, W) of at least 16x16, got shape {x.shape}")

    def logits(self, x: Tensor) -> Tensor:
        """conv-relu-pool twice, then two linear layers."""
        y = self.pooling1(autograd.relu(self.conv1(x)))
        y = self.pooling2(autograd.relu(self.conv2(y)))
        y = autograd.relu(self.linear1(self.flatten(y)))
        return self.linear2(y)


def create_model(pretrained: bool = False, **kwargs: Any) -> CNN:
    """A :class:`CNN` (SINGA's factory signature; no pretrained weights exist)."""
    if pretrained:
        raise NotImplementedError("CNN: no pretrained weights are available")
    return CNN(**kwargs)
