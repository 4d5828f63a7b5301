"""Xception (Chollet 2017), as in SINGA's ``examples/autograd/xceptionnet.py``.

Entry flow: Conv(32, 3x3, stride 2) -> BN -> ReLU -> Conv(64, 3x3, pad 1) -> BN -> ReLU,
blocks to 128, 256 and 728 channels (each halving the size); middle flow: eight
blocks of three 728-channel separable convolutions; exit flow: a block to 1024
channels, SeparableConv(1536) -> BN -> ReLU -> SeparableConv(2048) -> BN -> ReLU,
global pooling and ``Linear(num_classes)``.

Differences from SINGA's example, to adapt to the input size:

- small images (min side <= 64, e.g. 28x28, 32x32) use a stride-1 first convolution
  with padding 1 (32x32 -> 32x32 -> 16, 8, 4, then 2x2 in the exit flow); larger ones
  (299x299) the original stride 2 without padding (299 -> 149 -> 75, 38, 19, 10);
- the final pooling is a global average pooling (the paper's), not ``MaxPool2d(10)``,
  so any size that survives the downsampling works.

Example::

    m = zoo.xceptionnet.Xception(num_classes=10, num_channels=3, image_size=299)
"""

from __future__ import annotations

from typing import Any

from singa import autograd, layer
from singa.layer.base import Layer
from singa.tensor import Tensor
from singa.zoo.base import Classifier

__all__ = ["Block", "Xception", "create_model"]


class Block(Layer):
    """Xception's block: ``reps`` times (ReLU -> SeparableConv 3x3 -> BN), then a
    MaxPool(3, strides, padding + 1) when ``strides != 1``, plus a shortcut (1x1
    convolution with BN when the shape changes, the identity otherwise).

    Args:
        in_filters, out_filters: channels in and out.
        reps: separable convolutions in the block.
        strides: the pooling stride (and the shortcut's).
        padding: the shortcut's padding (the pooling pads ``padding + 1``).
        start_with_relu: whether the block starts with a ReLU.
        grow_first: change the channels in the first (or else the last) convolution.
    """

    def __init__(
        self,
        in_filters: int,
        out_filters: int,
        reps: int,
        strides: int = 1,
        padding: int = 0,
        start_with_relu: bool = True,
        grow_first: bool = True,
    ):
        super().__init__()
        if out_filters != in_filters or strides != 1:
            self.skip = layer.Conv2d(out_filters, 1, stride=strides, padding=padding, bias=False)
            self.skipbn = layer.BatchNorm2d()
        else:
            self.skip = None
            self.skipbn = None
        # each unit: (relu before?, separable conv, batchnorm)
        convs = []
        filters = in_filters
        if grow_first:
            convs.append(out_filters)
            filters = out_filters
        convs += [filters] * (reps - 1)
        if not grow_first:
            convs.append(out_filters)
        self.relu_first = bool(start_with_relu)
        self.sepconvs = [layer.SeparableConv2d(c, 3, stride=1, padding=1, bias=False) for c in convs]
        self.bns = [layer.BatchNorm2d() for _ in convs]
        self.pool = layer.MaxPool2d(3, strides, padding=padding + 1) if strides != 1 else None

    def forward(self, x: Tensor) -> Tensor:
        """The block's output."""
        y = x
        for i, (conv, bn) in enumerate(zip(self.sepconvs, self.bns)):
            if i > 0 or self.relu_first:
                y = autograd.relu(y)
            y = bn(conv(y))
        if self.pool is not None:
            y = self.pool(y)
        skip = self.skipbn(self.skip(x)) if self.skip is not None else x
        return autograd.add(y, skip)


class Xception(Classifier):
    """Xception; see the module docstring.

    Args:
        num_classes, num_channels, image_size: see :class:`~singa.zoo.base.Classifier`
            (the first convolution is chosen from ``image_size`` or the first input).
        middle_blocks: blocks in the middle flow (8 in the paper).
    """

    size_dependent = True

    def __init__(
        self,
        num_classes: int = 10,
        num_channels: int = 3,
        image_size: Any = None,
        middle_blocks: int = 8,
    ):
        self.middle_blocks = int(middle_blocks)
        super().__init__(num_classes, num_channels, image_size)

    def build(self) -> None:
        """Create the entry, middle and exit flows."""
        if self.small_input:
            self.conv1 = layer.Conv2d(32, 3, stride=1, padding=1, bias=False)
        else:
            self.conv1 = layer.Conv2d(32, 3, stride=2, padding=0, bias=False)
        self.bn1 = layer.BatchNorm2d()
        self.conv2 = layer.Conv2d(64, 3, stride=1, padding=1, bias=False)
        self.bn2 = layer.BatchNorm2d()
        self.block1 = Block(64, 128, 2, 2, padding=0, start_with_relu=False, grow_first=True)
        self.block2 = Block(128, 256, 2, 2, padding=0, start_with_relu=True, grow_first=True)
        self.block3 = Block(256, 728, 2, 2, padding=0, start_with_relu=True, grow_first=True)
        self.middle = [
            Block(728, 728, 3, 1, start_with_relu=True, grow_first=True) for _ in range(self.middle_blocks)
        ]
        self.block12 = Block(728, 1024, 2, 2, start_with_relu=True, grow_first=False)
        self.conv3 = layer.SeparableConv2d(1536, 3, stride=1, padding=1)
        self.bn3 = layer.BatchNorm2d()
        self.conv4 = layer.SeparableConv2d(2048, 3, stride=1, padding=1)
        self.bn4 = layer.BatchNorm2d()
        self.global_pool = layer.GlobalAvgPool2d()
        self.flatten = layer.Flatten()
        self.fc = layer.Linear(self.num_classes)

    def features(self, x: Tensor) -> Tensor:
        """The entry, middle and exit flows up to the last BatchNorm."""
        y = autograd.relu(self.bn1(self.conv1(x)))
        y = autograd.relu(self.bn2(self.conv2(y)))
        y = self.block3(self.block2(self.block1(y)))
        for blk in self.middle:
            y = blk(y)
        y = self.block12(y)
        y = autograd.relu(self.bn3(self.conv3(y)))
        return self.bn4(self.conv4(y))

    def logits(self, x: Tensor) -> Tensor:
        """ReLU, global pooling and the linear classifier on the features."""
        y = autograd.relu(self.features(x))
        return self.fc(self.flatten(self.global_pool(y)))


def create_model(pretrained: bool = False, **kwargs: Any) -> Xception:
    """An :class:`Xception` (SINGA's factory signature; no pretrained weights exist)."""
    if pretrained:
        raise NotImplementedError("Xception: no pretrained weights are available")
    return Xception(**kwargs)
