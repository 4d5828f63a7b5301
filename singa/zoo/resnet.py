"""Residual networks (He et al. 2016): ResNet-18/34/50 and the small CIFAR ResNets.

``ResNet`` follows torchvision: a stem, four stages of basic blocks (ResNet-18/34) or
bottleneck blocks (ResNet-50) with 64, 128, 256 and 512 channels (times 4 for
bottlenecks), the first block of stages 2-4 with stride 2 and a 1x1 projection
shortcut, then global average pooling and ``Linear(num_classes)``.

- Large images (min side > 64): the ImageNet stem Conv(64, 7x7, stride 2, pad 3) ->
  BatchNorm -> ReLU -> MaxPool(3, stride 2, pad 1).
- Small images (28x28, 32x32, up to 64x64): the CIFAR stem Conv(64, 3x3, stride 1,
  pad 1) -> BatchNorm -> ReLU, no max pooling.

``CifarResNet`` is the network of the paper's CIFAR-10 experiments: Conv(16, 3x3) ->
BatchNorm -> ReLU, three stages of ``n`` basic blocks with 16, 32 and 64 channels
(depth 6n + 2: ResNet-8 for n = 1, ResNet-20 for n = 3), global average pooling and
``Linear(num_classes)``; projection shortcuts where the shape changes.

Global average pooling makes every variant accept any input size that survives the
downsampling (at least 1x1 before the pooling).

Example::

    m = zoo.resnet.resnet18(num_classes=10, num_channels=3)     # stem chosen on first call
    m = zoo.resnet.CifarResNet(depth=20, num_classes=10, num_channels=3)
"""

from __future__ import annotations

from typing import Any

from singa import autograd, layer
from singa.layer.base import Layer
from singa.tensor import Tensor
from singa.zoo.base import Classifier

__all__ = [
    "BasicBlock",
    "Bottleneck",
    "ResNet",
    "CifarResNet",
    "resnet8",
    "resnet20",
    "resnet18",
    "resnet34",
    "resnet50",
    "create_model",
]


def _conv_bn(channels: int, kernel: int, stride: int = 1) -> tuple[layer.Conv2d, layer.BatchNorm2d]:
    """A bias-free convolution with "same" padding for odd kernels and its BatchNorm."""
    return layer.Conv2d(channels, kernel, stride=stride, padding=kernel // 2, bias=False), layer.BatchNorm2d()


class BasicBlock(Layer):
    """Two 3x3 conv-BN layers with a shortcut: ``relu(bn2(conv2(relu(bn1(conv1(x))))) + s(x))``
    where ``s`` is the identity or, when ``stride != 1`` or the channels change, a 1x1
    projection with BatchNorm."""

    expansion = 1

    def __init__(self, in_channels: int, channels: int, stride: int = 1):
        super().__init__()
        self.conv1, self.bn1 = _conv_bn(channels, 3, stride)
        self.conv2, self.bn2 = _conv_bn(channels, 3)
        out = channels * self.expansion
        self.shortcut = list(_conv_bn(out, 1, stride)) if stride != 1 or in_channels != out else []

    def _skip(self, x: Tensor) -> Tensor:
        if self.shortcut:
            conv, bn = self.shortcut
            return bn(conv(x))
        return x

    def forward(self, x: Tensor) -> Tensor:
        """The block's output."""
        y = autograd.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return autograd.relu(autograd.add(y, self._skip(x)))


class Bottleneck(BasicBlock):
    """1x1 (reduce) -> 3x3 (with the stride) -> 1x1 (expand by 4), each with BatchNorm,
    plus the shortcut (torchvision's ResNet v1.5)."""

    expansion = 4

    def __init__(self, in_channels: int, channels: int, stride: int = 1):
        Layer.__init__(self)
        self.conv1, self.bn1 = _conv_bn(channels, 1)
        self.conv2, self.bn2 = _conv_bn(channels, 3, stride)
        out = channels * self.expansion
        self.conv3, self.bn3 = _conv_bn(out, 1)
        self.shortcut = list(_conv_bn(out, 1, stride)) if stride != 1 or in_channels != out else []

    def forward(self, x: Tensor) -> Tensor:
        """The block's output."""
        y = autograd.relu(self.bn1(self.conv1(x)))
        y = autograd.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return autograd.relu(autograd.add(y, self._skip(x)))


def _stage(block: type, in_channels: int, channels: int, blocks: int, stride: int) -> tuple[list, int]:
    layers = []
    for i in range(blocks):
        layers.append(block(in_channels, channels, stride if i == 0 else 1))
        in_channels = channels * block.expansion
    return layers, in_channels


class _ResNetBase(Classifier):
    def head(self, y: Tensor) -> Tensor:
        y = self.flatten(self.global_pool(y))
        return self.fc(y)

    def _make_head(self) -> None:
        self.global_pool = layer.GlobalAvgPool2d()
        self.flatten = layer.Flatten()
        self.fc = layer.Linear(self.num_classes)


class ResNet(_ResNetBase):
    """ResNet with ``block`` (:class:`BasicBlock` or :class:`Bottleneck`) and
    ``layers`` blocks per stage; see the module docstring.

    Args:
        block: the block class.
        layers: blocks in each of the four stages ((2, 2, 2, 2) is ResNet-18).
        num_classes, num_channels, image_size: see :class:`~singa.zoo.base.Classifier`.
    """

    size_dependent = True

    def __init__(
        self,
        block: type = BasicBlock,
        layers: tuple = (2, 2, 2, 2),
        num_classes: int = 10,
        num_channels: int = 3,
        image_size: Any = None,
    ):
        if len(layers) != 4 or any(int(n) < 1 for n in layers):
            raise ValueError(f"ResNet: layers must be 4 block counts >= 1, got {layers!r}")
        self.block = block
        self.layers = tuple(int(n) for n in layers)
        super().__init__(num_classes, num_channels, image_size)

    def build(self) -> None:
        """Create the stem for ``self.image_size``, the four stages and the head."""
        if self.small_input:
            self.conv1, self.bn1 = _conv_bn(64, 3)
            self.maxpool = None
        else:
            self.conv1, self.bn1 = _conv_bn(64, 7, stride=2)
            self.maxpool = layer.MaxPool2d(3, 2, padding=1)
        c = 64
        self.layer1, c = _stage(self.block, c, 64, self.layers[0], 1)
        self.layer2, c = _stage(self.block, c, 128, self.layers[1], 2)
        self.layer3, c = _stage(self.block, c, 256, self.layers[2], 2)
        self.layer4, c = _stage(self.block, c, 512, self.layers[3], 2)
        self._make_head()

    def logits(self, x: Tensor) -> Tensor:
        """Stem, stages, global average pooling, linear."""
        y = autograd.relu(self.bn1(self.conv1(x)))
        if self.maxpool is not None:
            y = self.maxpool(y)
        for stage in (self.layer1, self.layer2, self.layer3, self.layer4):
            for blk in stage:
                y = blk(y)
        return self.head(y)


class CifarResNet(_ResNetBase):
    """The CIFAR-10 ResNet of depth 6n + 2 (8, 14, 20, 32, 44, 56, 110, ...).

    Args:
        depth: 6n + 2 for n >= 1.
        num_classes, num_channels, image_size: see :class:`~singa.zoo.base.Classifier`.
        width: channels of the first stage (16 in the paper; doubled at each stage).
    """

    def __init__(
        self,
        depth: int = 20,
        num_classes: int = 10,
        num_channels: int = 3,
        image_size: Any = None,
        width: int = 16,
    ):
        if int(depth) < 8 or (int(depth) - 2) % 6:
            raise ValueError(f"CifarResNet: depth must be 6n + 2 with n >= 1 (8, 14, 20, ...), got {depth}")
        self.depth = int(depth)
        self.width = int(width)
        super().__init__(num_classes, num_channels, image_size)

    def build(self) -> None:
        """Create the stem, the three stages and the head."""
        n = (self.depth - 2) // 6
        w = self.width
        self.conv1, self.bn1 = _conv_bn(w, 3)
        self.layer1, c = _stage(BasicBlock, w, w, n, 1)
        self.layer2, c = _stage(BasicBlock, c, 2 * w, n, 2)
        self.layer3, c = _stage(BasicBlock, c, 4 * w, n, 2)
        self._make_head()

    def logits(self, x: Tensor) -> Tensor:
        """Stem, stages, global average pooling, linear."""
        y = autograd.relu(self.bn1(self.conv1(x)))
        for stage in (self.layer1, self.layer2, self.layer3):
            for blk in stage:
                y = blk(y)
        return self.head(y)


def resnet8(**kwargs: Any) -> CifarResNet:
    """The CIFAR ResNet-8 (one basic block per stage)."""
    return CifarResNet(depth=8, **kwargs)


def resnet20(**kwargs: Any) -> CifarResNet:
    """The CIFAR ResNet-20 (three basic blocks per stage)."""
    return CifarResNet(depth=20, **kwargs)


def resnet18(**kwargs: Any) -> ResNet:
    """ResNet-18: basic blocks (2, 2, 2, 2)."""
    return ResNet(BasicBlock, (2, 2, 2, 2), **kwargs)


def resnet34(**kwargs: Any) -> ResNet:
    """ResNet-34: basic blocks (3, 4, 6, 3)."""
    return ResNet(BasicBlock, (3, 4, 6, 3), **kwargs)


def resnet50(**kwargs: Any) -> ResNet:
    """ResNet-50: bottleneck blocks (3, 4, 6, 3)."""
    return ResNet(Bottleneck, (3, 4, 6, 3), **kwargs)


_DEPTHS = {8: resnet8, 20: resnet20, 18: resnet18, 34: resnet34, 50: resnet50}


def create_model(pretrained: bool = False, depth: int = 18, **kwargs: Any) -> Classifier:
    """A ResNet of ``depth`` 8 or 20 (CIFAR) or 18, 34 or 50 (SINGA's factory
    signature; no pretrained weights exist)."""
    if pretrained:
        raise NotImplementedError("ResNet: no pretrained weights are available")
    if depth not in _DEPTHS:
        raise ValueError(f"ResNet: depth must be one of {sorted(_DEPTHS)}, got {depth}")
    return _DEPTHS[depth](**kwargs)
