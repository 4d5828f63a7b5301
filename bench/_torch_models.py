"""The zoo's benchmark networks written in PyTorch, layer for layer as ``singa.zoo``
builds them for small images (28x28 / 32x32), so that parameter counts match.

Imported only when PyTorch is used (this module imports torch at the top).
"""

from __future__ import annotations

from torch import nn

__all__ = ["build", "count_params"]


def count_params(net: nn.Module) -> int:
    """Number of trainable parameter values."""
    return sum(p.numel() for p in net.parameters() if p.requires_grad)


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False), nn.BatchNorm2d(cout)]


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers plus the identity or a 1x1 conv-BN projection (singa.zoo.resnet)."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.body = nn.Sequential(
            *_conv_bn(cin, cout, 3, stride), nn.ReLU(), *_conv_bn(cout, cout, 3)
        )  # fmt: skip
        self.shortcut = nn.Sequential(*_conv_bn(cin, cout, 1, stride)) if stride != 1 or cin != cout else None

    def forward(self, x):
        skip = x if self.shortcut is None else self.shortcut(x)
        return (self.body(x) + skip).relu()


def _stage(cin: int, cout: int, blocks: int, stride: int) -> list[nn.Module]:
    return [BasicBlock(cin if i == 0 else cout, cout, stride if i == 0 else 1) for i in range(blocks)]


def cifar_resnet(depth: int, channels: int = 3, classes: int = 10) -> nn.Module:
    """The CIFAR ResNet of depth 6n + 2 with projection shortcuts (zoo.CifarResNet)."""
    n = (depth - 2) // 6
    return nn.Sequential(
        *_conv_bn(channels, 16, 3), nn.ReLU(),
        *_stage(16, 16, n, 1), *_stage(16, 32, n, 2), *_stage(32, 64, n, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes),
    )  # fmt: skip


def resnet18_small(channels: int = 3, classes: int = 10) -> nn.Module:
    """ResNet-18 with the small-image stem (3x3 conv 64, no max pooling), as zoo.resnet18."""
    return nn.Sequential(
        *_conv_bn(channels, 64, 3), nn.ReLU(),
        *_stage(64, 64, 2, 1), *_stage(64, 128, 2, 2), *_stage(128, 256, 2, 2), *_stage(256, 512, 2, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes),
    )  # fmt: skip


def alexnet_small(channels: int = 3, classes: int = 10, image: int = 32) -> nn.Module:
    """AlexNet's small-image form (zoo.AlexNet): five 3x3 convolutions, three 2x2 max
    poolings, dropout 0.5 and two hidden linear layers of 1024."""
    side = image // 8
    return nn.Sequential(
        nn.Conv2d(channels, 64, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 192, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(192, 384, 3, 1, 1), nn.ReLU(),
        nn.Conv2d(384, 256, 3, 1, 1), nn.ReLU(),
        nn.Conv2d(256, 256, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.5), nn.Linear(256 * side * side, 1024), nn.ReLU(),
        nn.Dropout(0.5), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, classes),
    )  # fmt: skip


def cnn(channels: int = 1, classes: int = 10, image: int = 28) -> nn.Module:
    """The MNIST CNN (zoo.CNN): conv5x5 32, pool, conv5x5 64, pool, linear 500, linear."""
    side = ((image - 4) // 2 - 4) // 2
    return nn.Sequential(
        nn.Conv2d(channels, 32, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * side * side, 500), nn.ReLU(), nn.Linear(500, classes),
    )  # fmt: skip


def mlp(inputs: int = 784, classes: int = 10) -> nn.Module:
    """The MLP 784-100-10 (zoo.MLP)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(inputs, 100), nn.ReLU(), nn.Linear(100, classes))


def build(name: str) -> nn.Module:
    """The PyTorch network for a zoo name used by the benchmarks."""
    factories = {
        "mlp": mlp,
        "cnn": cnn,
        "resnet8": lambda: cifar_resnet(8),
        "resnet20": lambda: cifar_resnet(20),
        "alexnet": alexnet_small,
        "resnet18": resnet18_small,
    }
    if name not in factories:
        raise ValueError(f"no PyTorch network for {name!r}; known: {sorted(factories)}")
    return factories[name]()
