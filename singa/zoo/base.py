"""The base class of the zoo's models: an image classifier trained with softmax
cross-entropy, whose architecture may depend on the input size.

A :class:`Classifier` is a :class:`singa.model.Model` whose ``train_one_batch(x, y)``
runs ``forward``, ``softmax_cross_entropy`` and ``self.optimizer(loss)`` (backward and
update) and returns ``(out, loss)``, as SINGA's example models do. Setting
``criterion`` to another loss layer (e.g. ``layer.MeanSquareError()``) trains with it.

Size-dependent models (AlexNet, the ResNets, Xception) choose their stem from the
input size: pass ``image_size`` to build the layers now, or leave it None and they are
built on the first call (``compile`` or the first batch) from the input's (H, W).
Images whose shorter side is at most :data:`SMALL_IMAGE` pixels (MNIST's 28x28,
CIFAR's 32x32, Tiny ImageNet's 64x64) get a stride-1 stem without early downsampling;
larger ones (224x224, 299x299) the original ImageNet stem.
"""

from __future__ import annotations

from typing import Any

from singa import layer, model
from singa.layer.base import Layer
from singa.opt.dist import DIST_OPTIONS, backward_with_option
from singa.tensor import Tensor

__all__ = ["Classifier", "SMALL_IMAGE", "image_hw"]

#: inputs with min(H, W) <= SMALL_IMAGE use the small-image variant of a size-dependent model
SMALL_IMAGE = 64


def image_hw(image_size: Any) -> tuple[int, int] | None:
    """``image_size`` as a pair (H, W): an int n means (n, n); None stays None."""
    if image_size is None:
        return None
    if isinstance(image_size, int | float) and not isinstance(image_size, bool):
        h = w = int(image_size)
    else:
        try:
            h, w = (int(v) for v in image_size)
        except (TypeError, ValueError):
            raise ValueError(f"image_size must be an int or a pair (H, W), got {image_size!r}") from None
    if h < 1 or w < 1:
        raise ValueError(f"image_size must be positive, got {image_size!r}")
    return (h, w)


class Classifier(model.Model):
    """An image classifier for NCHW inputs with ``num_channels`` channels and
    ``num_classes`` output logits.

    Subclasses create their layers in :meth:`build` (called once, with the image size
    when it matters) and define :meth:`logits`; ``forward`` builds on the first call
    when needed and returns the logits.

    Args:
        num_classes: number of classes (logits per sample).
        num_channels: channels of the input images.
        image_size: (H, W) or an int; None means "decide on the first call" for models
            whose layers depend on it.
    """

    #: whether :meth:`build` depends on the image size (then building waits for it)
    size_dependent = False

    def __init__(self, num_classes: int = 10, num_channels: int = 1, image_size: Any = None):
        super().__init__()
        if int(num_classes) < 1 or int(num_channels) < 1:
            raise ValueError(
                f"{type(self).__name__}: num_classes and num_channels must be >= 1, "
                f"got {num_classes} and {num_channels}"
            )
        self.num_classes = int(num_classes)
        self.num_channels = int(num_channels)
        self.image_size = image_hw(image_size)
        self.softmax_cross_entropy = layer.SoftMaxCrossEntropy()
        #: the training loss layer ``criterion(out, y)``; None: softmax cross-entropy.
        #: ``layer.MeanSquareError()`` makes the model a regressor (float targets of the
        #: output's shape), as ``singa-train --task regression`` does.
        self.criterion: Layer | None = None
        self._built = False
        if self.image_size is not None or not self.size_dependent:
            self._build()

    # ----- building --------------------------------------------------------------------------
    @property
    def small_input(self) -> bool:
        """Whether the (known) image size takes the small-image variant."""
        return self.image_size is not None and min(self.image_size) <= SMALL_IMAGE

    def build(self) -> None:
        """Create the layers (``self.image_size`` is set when ``size_dependent``)."""
        raise NotImplementedError(f"{type(self).__name__}.build")

    def _build(self) -> None:
        self.build()
        self._built = True
        Layer.train(self, self.training)  # layers made now take the model's mode

    def _check_input(self, x: Tensor) -> None:
        if x.ndim() < 2 or x.shape[1] != self.num_channels:
            raise ValueError(
                f"{type(self).__name__}: expected input (N, {self.num_channels}, H, W), got shape {x.shape}"
            )
        if not self._built:
            if x.ndim() != 4:
                raise ValueError(f"{type(self).__name__}: expected an NCHW input, got shape {x.shape}")
            self.image_size = (int(x.shape[2]), int(x.shape[3]))
            self._build()

    # ----- the model API ---------------------------------------------------------------------
    def logits(self, x: Tensor) -> Tensor:
        """The class scores (N, num_classes) of a batch."""
        raise NotImplementedError(f"{type(self).__name__}.logits")

    def forward(self, x: Tensor) -> Tensor:
        """The logits (N, num_classes) of a batch x (N, num_channels, H, W)."""
        self._check_input(x)
        return self.logits(x)

    def train_one_batch(self, x: Tensor, y: Tensor, dist_option: str = "plain", spars: Any = None) -> tuple:
        """One training step: forward, softmax cross-entropy against the int labels
        ``y`` (or ``self.criterion`` when set), then ``self.optimizer(loss)`` (backward and update). Returns
        ``(out, loss)``. ``dist_option`` and ``spars`` are SINGA's distributed-training
        arguments (see :func:`singa.opt.dist.backward_with_option`): ``"plain"``, or with
        a :class:`~singa.opt.DistOpt` ``"half"``, ``"partialUpdate"``, ``"sparseTopK"``
        or ``"sparseThreshold"``."""
        if dist_option not in DIST_OPTIONS:
            raise ValueError(
                f"{type(self).__name__}: dist_option must be one of {list(DIST_OPTIONS)}, got {dist_option!r}"
            )
        if self.optimizer is None:
            raise RuntimeError(f"{type(self).__name__}: call set_optimizer(...) before training")
        out = self.forward(x)
        criterion = self.softmax_cross_entropy if self.criterion is None else self.criterion
        loss = criterion(out, y)
        backward_with_option(self.optimizer, loss, dist_option, spars)
        return out, loss

    def __repr__(self) -> str:
        size = "" if self.image_size is None else f", image_size={self.image_size}"
        return (
            f"{type(self).__name__}(num_classes={self.num_classes}, num_channels={self.num_channels}{size})"
        )
