"""A small Vision Transformer (ViT, Dosovitskiy et al.) for 28x28 / 32x32 images.

Patches (7x7 on 28x28, 4x4 on 32x32, else the largest of 7, 4, 2, 1 dividing both
sides) -> :class:`~singa.layer.PatchEmbedding` -> learned positions -> ``num_layers``
pre-norm encoder blocks (GELU, feed-forward 4x the width) -> LayerNorm -> the mean of
the patch tokens -> Linear(num_classes). Defaults: 6 layers, 4 heads, width 128.
"""

from __future__ import annotations

from typing import Any

from singa import autograd, layer
from singa.tensor import Tensor
from singa.zoo.base import Classifier

__all__ = ["ViT", "create_model", "patch_size_for"]


def patch_size_for(image_size: tuple[int, int]) -> int:
    """7 for 28x28, 4 for 32x32, else the largest of 7, 4, 2, 1 dividing H and W."""
    h, w = image_size
    if (h, w) == (28, 28):
        return 7
    if (h, w) == (32, 32):
        return 4
    return next(p for p in (7, 4, 2, 1) if h % p == 0 and w % p == 0)


class ViT(Classifier):
    """The Vision Transformer classifier (built on the first batch when
    ``image_size`` is None).

    Args:
        num_classes, num_channels, image_size: see :class:`~singa.zoo.base.Classifier`.
        num_layers, num_heads, width: the encoder blocks, heads and width.
        patch_size: None picks it from the image size (:func:`patch_size_for`).
        dropout: dropout inside the blocks.
    """

    size_dependent = True

    def __init__(
        self,
        num_classes: int = 10,
        num_channels: int = 1,
        image_size: Any = None,
        num_layers: int = 6,
        num_heads: int = 4,
        width: int = 128,
        patch_size: int | None = None,
        dropout: float = 0.0,
    ):
        self.num_layers, self.num_heads, self.width = int(num_layers), int(num_heads), int(width)
        self.patch_size = patch_size
        self.dropout = float(dropout)
        super().__init__(num_classes, num_channels, image_size)

    def build(self) -> None:
        """Create the layers for ``self.image_size``."""
        assert self.image_size is not None  # size-dependent: built once the size is known
        p = self.patch_size or patch_size_for(self.image_size)
        h, w = self.image_size
        if h % p or w % p:
            raise ValueError(f"ViT: patch size {p} does not divide the image size {self.image_size}")
        self.patch_size = p
        self.patches = layer.PatchEmbedding(p, self.width, in_channels=self.num_channels)
        self.pos_emb = layer.PositionalEmbedding((h // p) * (w // p), self.width)
        block = layer.TransformerEncoderLayer(
            self.width, self.num_heads, 4 * self.width, self.dropout, "gelu", norm_first=True
        )
        self.encoder = layer.TransformerEncoder(block, self.num_layers, norm=layer.LayerNorm(self.width))
        self.fc = layer.Linear(self.width, self.num_classes)

    def logits(self, x: Tensor) -> Tensor:
        """Class scores (N, num_classes)."""
        h = self.encoder(self.pos_emb(self.patches(x)))
        return self.fc(autograd.reduce_mean(h, [1], keepdims=0))


def create_model(**kwargs: Any) -> ViT:
    """A :class:`ViT` (SINGA's model-module factory form)."""
    return ViT(**kwargs)
