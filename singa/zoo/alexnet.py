"""AlexNet (Krizhevsky et al. 2012, in torchvision's single-tower form).

- Large images (min side > 64, e.g. 224x224): Conv(64, 11x11, stride 4, pad 2) -> ReLU ->
  MaxPool(3, 2) -> Conv(192, 5x5, pad 2) -> ReLU -> MaxPool(3, 2) -> Conv(384, 3x3) ->
  ReLU -> Conv(256, 3x3) -> ReLU -> Conv(256, 3x3) -> ReLU -> MaxPool(3, 2) (6x6 at 224),
  then Dropout -> Linear(4096) -> ReLU -> Dropout -> Linear(4096) -> ReLU -> Linear(classes).
- Small images (28x28, 32x32, up to 64x64): the same five convolutions, all 3x3 with
  stride 1 and padding 1, and MaxPool(2, 2) after the first, the second and the last
  (32x32 -> 4x4, 28x28 -> 3x3); the hidden linear layers have 1024 units.

Example::

    m = zoo.alexnet.AlexNet(num_classes=10, num_channels=3)   # built on the first call
"""

from __future__ import annotations

from typing import Any

from singa import autograd, layer
from singa.tensor import Tensor
from singa.zoo.base import Classifier

__all__ = ["AlexNet", "create_model"]


class AlexNet(Classifier):
    """AlexNet; see the module docstring for the two variants.

    Args:
        num_classes, num_channels, image_size: see :class:`~singa.zoo.base.Classifier`
            (the variant is chosen from ``image_size`` or from the first input).
        hidden: units of the two hidden linear layers (None: 4096 for large images,
            1024 for small ones).
        dropout: the dropout ratio before the hidden linear layers.
    """

    size_dependent = True

    def __init__(
        self,
        num_classes: int = 10,
        num_channels: int = 3,
        image_size: Any = None,
        hidden: int | None = None,
        dropout: float = 0.5,
    ):
        self.hidden = None if hidden is None else int(hidden)
        self.dropout = float(dropout)
        super().__init__(num_classes, num_channels, image_size)

    def build(self) -> None:
        """Create the layers for ``self.image_size``."""
        if self.small_input:
            self.conv1 = layer.Conv2d(64, 3, stride=1, padding=1)
            self.pool1 = layer.MaxPool2d(2, 2)
            self.conv2 = layer.Conv2d(192, 3, padding=1)
            self.pool2 = layer.MaxPool2d(2, 2)
            self.pool3 = layer.MaxPool2d(2, 2)
            hidden = 1024
        else:
            self.conv1 = layer.Conv2d(64, 11, stride=4, padding=2)
            self.pool1 = layer.MaxPool2d(3, 2)
            self.conv2 = layer.Conv2d(192, 5, padding=2)
            self.pool2 = layer.MaxPool2d(3, 2)
            self.pool3 = layer.MaxPool2d(3, 2)
            hidden = 4096
        hidden = self.hidden if self.hidden is not None else hidden
        self.conv3 = layer.Conv2d(384, 3, padding=1)
        self.conv4 = layer.Conv2d(256, 3, padding=1)
        self.conv5 = layer.Conv2d(256, 3, padding=1)
        self.flatten = layer.Flatten()
        self.dropout1 = layer.Dropout(self.dropout)
        self.linear1 = layer.Linear(hidden)
        self.dropout2 = layer.Dropout(self.dropout)
        self.linear2 = layer.Linear(hidden)
        self.linear3 = layer.Linear(self.num_classes)

    def logits(self, x: Tensor) -> Tensor:
        """The features, then the classifier."""
        relu = autograd.relu
        y = self.pool1(relu(self.conv1(x)))
        y = self.pool2(relu(self.conv2(y)))
        y = relu(self.conv3(y))
        y = relu(self.conv4(y))
        y = self.pool3(relu(self.conv5(y)))
        y = self.flatten(y)
        y = relu(self.linear1(self.dropout1(y)))
        y = relu(self.linear2(self.dropout2(y)))
        return self.linear3(y)


def create_model(pretrained: bool = False, **kwargs: Any) -> AlexNet:
    """An :class:`AlexNet` (SINGA's factory signature; no pretrained weights exist)."""
    if pretrained:
        raise NotImplementedError("AlexNet: no pretrained weights are available")
    return AlexNet(**kwargs)
