"""The model zoo: image classifiers ready to train (SINGA's ``examples/cnn/model``).

Every model is a :class:`singa.model.Model` subclass (:class:`~singa.zoo.base.Classifier`)
taking ``num_classes`` and ``num_channels``, with ``train_one_batch(x, y)`` that runs
forward, softmax cross-entropy and ``self.optimizer(loss)`` and returns ``(out, loss)``.
The size-dependent ones (AlexNet, the ResNets, Xception) adapt their stem to the input:
28x28 / 32x32 images as well as 224x224 / 299x299 (see :mod:`singa.zoo.base`).

=============== ==================================================================
``mlp``          Flatten -> Linear(100) -> ReLU -> Linear(classes)
``cnn``          the MNIST CNN: two 5x5 convolutions (32, 64) with pooling, Linear(500)
``alexnet``      AlexNet (torchvision's single-tower form)
``resnet8``      CIFAR ResNet-8 (16/32/64 channels, one block per stage)
``resnet20``     CIFAR ResNet-20 (three blocks per stage)
``resnet18``     ResNet-18 (basic blocks)
``resnet34``     ResNet-34 (basic blocks)
``resnet50``     ResNet-50 (bottleneck blocks)
``xceptionnet``  Xception
``vit``          Vision Transformer: patches 7x7 (28x28) / 4x4 (32x32), 6 blocks, width 128
``gpt``          character/byte language model: 4 blocks, 4 heads, width 128, context 128
=============== ==================================================================

Example::

    from singa import opt, zoo
    print(zoo.names())
    m = zoo.create("resnet20", num_classes=10, num_channels=3, image_size=32)
    m.set_optimizer(opt.SGD(lr=0.1, momentum=0.9, weight_decay=5e-4))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from singa.model import Model
from singa.zoo import alexnet, cnn, gpt, mlp, resnet, vit, xceptionnet
from singa.zoo.alexnet import AlexNet
from singa.zoo.base import SMALL_IMAGE, Classifier
from singa.zoo.cnn import CNN
from singa.zoo.gpt import GPT
from singa.zoo.mlp import MLP
from singa.zoo.resnet import CifarResNet, ResNet, resnet8, resnet18, resnet20, resnet34, resnet50
from singa.zoo.vit import ViT
from singa.zoo.xceptionnet import Xception

__all__ = [
    "Classifier",
    "SMALL_IMAGE",
    "MLP",
    "CNN",
    "AlexNet",
    "ResNet",
    "CifarResNet",
    "Xception",
    "ViT",
    "GPT",
    "resnet8",
    "resnet20",
    "resnet18",
    "resnet34",
    "resnet50",
    "create",
    "names",
    "describe",
    "register",
]

_REGISTRY: dict[str, tuple[Callable[..., Model], str]] = {}
_ALIASES = {"xception": "xceptionnet", "resnet": "resnet18", "lenet": "cnn"}


def register(name: str, factory: Callable[..., Model], description: str = "") -> None:
    """Add a model to the registry: ``factory(num_classes=, num_channels=, image_size=,
    **kwargs)`` returns a :class:`~singa.model.Model`. Replaces an existing entry."""
    key = str(name).strip().lower()
    if not key:
        raise ValueError("register: the name must not be empty")
    _REGISTRY[key] = (factory, description)


def names() -> list[str]:
    """The registered model names, in registration order."""
    return list(_REGISTRY)


def _squash(name: str) -> str:
    return "".join(c for c in str(name).lower() if c not in "-_ ")


def _key(name: str) -> str:
    """The registry key of ``name``: case, '-', '_' and spaces do not matter."""
    want = _squash(name)
    want = _squash(_ALIASES.get(want, want))
    for key in _REGISTRY:
        if _squash(key) == want:
            return key
    raise ValueError(f"unknown model {name!r}; available: {', '.join(names())}")


def describe(name: str) -> str:
    """A one-line description of a registered model."""
    return _REGISTRY[_key(name)][1]


def create(
    name: str,
    num_classes: int = 10,
    num_channels: int = 1,
    image_size: Any = None,
    **kwargs: Any,
) -> Model:
    """A new model ``name`` (see :func:`names`) for ``num_classes`` classes and
    ``num_channels`` input channels. ``image_size`` (an int or (H, W)) picks the
    variant of size-dependent models now; None decides on the first call. Other
    keyword arguments go to the model's constructor (e.g. ``hidden=(256,)`` for mlp)."""
    factory, _ = _REGISTRY[_key(name)]
    return factory(num_classes=num_classes, num_channels=num_channels, image_size=image_size, **kwargs)


register("mlp", MLP, "multilayer perceptron: Linear(100) -> ReLU -> Linear(classes)")
register("cnn", CNN, "MNIST CNN: conv5x5(32) -> pool -> conv5x5(64) -> pool -> Linear(500) -> Linear")
register("alexnet", AlexNet, "AlexNet (5 convolutions, 3 linear layers, dropout)")
register("resnet8", resnet8, "CIFAR ResNet-8 (16/32/64 channels, 1 basic block per stage)")
register("resnet20", resnet20, "CIFAR ResNet-20 (16/32/64 channels, 3 basic blocks per stage)")
register("resnet18", resnet18, "ResNet-18 (basic blocks 2-2-2-2, 64..512 channels)")
register("resnet34", resnet34, "ResNet-34 (basic blocks 3-4-6-3, 64..512 channels)")
register("resnet50", resnet50, "ResNet-50 (bottleneck blocks 3-4-6-3, 256..2048 channels)")
register("xceptionnet", Xception, "Xception (depthwise separable convolutions, 36 conv layers)")
register("vit", ViT, "Vision Transformer: patch 7 on 28x28 / 4 on 32x32, 6 pre-norm blocks, width 128")
register("gpt", GPT, "decoder-only char/byte language model: 4 blocks, 4 heads, width 128, context 128, tied")
