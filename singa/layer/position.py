"""Sequence positions and patches: learned and sinusoidal positional encodings, and
the ViT patch embedding."""

from __future__ import annotations

import numpy as np

from singa import autograd
from singa.layer._util import new_param
from singa.layer.base import Layer
from singa.layer.conv import Conv2d
from singa.tensor import Tensor

__all__ = ["PositionalEmbedding", "SinusoidalPositionalEncoding", "PatchEmbedding"]


def _check_sequence(name: str, x: Tensor, dim: int, max_len: int) -> None:
    if x.ndim() != 3 or x.shape[-1] != dim:
        raise ValueError(f"{name}: expected (batch, length, {dim}) input, got shape {x.shape}")
    if x.shape[1] > max_len:
        raise ValueError(f"{name}: the sequence of length {x.shape[1]} is longer than max_len {max_len}")


class PositionalEmbedding(Layer):
    """Learned absolute positions (GPT's ``wpe``): ``x + W[:length]`` for x of shape
    (batch, length, embed_dim); ``W`` (max_len, embed_dim) starts N(0, init_std^2)."""

    def __init__(self, max_len: int, embed_dim: int, init_std: float = 0.02, name: str | None = None):
        super().__init__(name)
        if max_len <= 0 or embed_dim <= 0:
            raise ValueError(
                f"PositionalEmbedding: max_len and embed_dim must be positive, got {max_len}, {embed_dim}"
            )
        self.max_len, self.embed_dim = int(max_len), int(embed_dim)
        self.W = new_param((self.max_len, self.embed_dim))
        self.W.gaussian(0.0, float(init_std))

    def initialize(self, x: Tensor) -> None:
        """Move ``W`` to the input's device and float dtype."""
        if self.W.device is not x.device:
            self.W.to_device(x.device)
        if x.dtype.kind == "f" and self.W.dtype != x.dtype:
            self.W.data = self.W.data.astype(x.dtype)

    def forward(self, x: Tensor) -> Tensor:
        """``x`` plus the embeddings of positions 0..length-1."""
        _check_sequence("PositionalEmbedding", x, self.embed_dim, self.max_len)
        return autograd.add(x, autograd.slice_like(self.W, x, 0, 1))

    def __repr__(self) -> str:
        return f"PositionalEmbedding(max_len={self.max_len}, embed_dim={self.embed_dim})"


class SinusoidalPositionalEncoding(Layer):
    """Fixed sinusoidal positions ("Attention Is All You Need"): ``x + PE[:length]``
    with PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(...). No parameters
    (the table is a constant, not a state)."""

    def __init__(self, embed_dim: int, max_len: int = 5000, base: float = 10000.0, name: str | None = None):
        super().__init__(name)
        if max_len <= 0 or embed_dim <= 0:
            raise ValueError(
                f"SinusoidalPositionalEncoding: max_len and embed_dim must be positive, "
                f"got {max_len}, {embed_dim}"
            )
        self.embed_dim, self.max_len, self.base = int(embed_dim), int(max_len), float(base)
        self._table: Tensor | None = None

    def table(self, x: Tensor) -> Tensor:
        """The (max_len, embed_dim) table on x's device and dtype (made once)."""
        t = self._table
        if t is None or t.device is not x.device or t.dtype != x.dtype:
            arr = autograd.sinusoidal_table(self.max_len, self.embed_dim, self.base, x.dtype)
            xp = x.device.xp
            t = Tensor.wrap(arr if xp is np else xp.asarray(arr), x.device)
            self._table = t
        return t

    def forward(self, x: Tensor) -> Tensor:
        """``x`` plus the encodings of positions 0..length-1."""
        _check_sequence("SinusoidalPositionalEncoding", x, self.embed_dim, self.max_len)
        return autograd.add(x, autograd.slice_like(self.table(x), x, 0, 1))


class PatchEmbedding(Layer):
    """ViT's patch embedding: non-overlapping ``patch_size`` squares of an image
    (batch, channels, H, W), each projected to ``embed_dim`` by a convolution of
    kernel = stride = patch_size; output (batch, (H // p) * (W // p), embed_dim), the
    patches in row-major order. H and W must be multiples of the patch size."""

    def __init__(
        self, patch_size: int, embed_dim: int, in_channels: int | None = None, name: str | None = None
    ):
        super().__init__(name)
        if patch_size <= 0 or embed_dim <= 0:
            raise ValueError(
                f"PatchEmbedding: patch_size and embed_dim must be positive, got {patch_size}, {embed_dim}"
            )
        self.patch_size, self.embed_dim = int(patch_size), int(embed_dim)
        p = self.patch_size
        if in_channels is None:
            self.proj = Conv2d(self.embed_dim, p, stride=p)
        else:
            self.proj = Conv2d(int(in_channels), self.embed_dim, p, p)

    def forward(self, x: Tensor) -> Tensor:
        """The patch tokens (batch, patches, embed_dim)."""
        if x.ndim() != 4 or x.shape[2] % self.patch_size or x.shape[3] % self.patch_size:
            raise ValueError(
                f"PatchEmbedding: expected (batch, channels, H, W) with H and W multiples of "
                f"{self.patch_size}, "
                f"got shape {x.shape}"
            )
        y = self.proj(x)
        b, d, h, w = y.shape
        return autograd.transpose(autograd.reshape(y, (b, d, h * w)), (0, 2, 1))
