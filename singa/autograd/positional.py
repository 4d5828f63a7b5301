"""Positions: the first rows of a table, as many as a sequence is long.

``slice_like(table, like, axis, like_axis)`` is ``table`` cut along ``axis`` to the size
``like`` has along ``like_axis``: the positional embeddings of a sequence, written so
that ONNX export reads the length from the sequence at run time (a dynamic length),
where a plain slice would fix it.
"""

from __future__ import annotations

import math

import numpy as np

from singa.autograd.engine import Operation
from singa.device import array_module
from singa.tensor import Tensor

__all__ = ["slice_like", "sinusoidal_table"]


class SliceLike(Operation):
    """y = x[:n] along ``axis``, n = ``like.shape[like_axis]``; the gradient goes to
    those rows of x (zeros elsewhere), none to ``like``."""

    def __init__(self, axis: int = 0, like_axis: int = 1):
        super().__init__()
        self.axis = axis
        self.like_axis = like_axis

    def forward(self, x, like):
        n = like.shape[self.like_axis]
        idx = (slice(None),) * self.axis + (slice(0, n),)
        if self.requires_grad:
            self.cache = (x.shape, idx)
        return x[idx].copy()

    def backward(self, dy):
        shape, idx = self.cache
        dx = array_module(dy).zeros(shape, dtype=dy.dtype)
        dx[idx] = dy
        return (dx,)


def slice_like(x: Tensor, like: Tensor, axis: int = 0, like_axis: int = 1) -> Tensor:
    """``x`` cut along ``axis`` to the length ``like`` has along ``like_axis`` (e.g. a
    (max_len, dim) table cut to a (batch, length, dim) sequence's length)."""
    ax = axis % x.ndim() if -x.ndim() <= axis < x.ndim() else None
    lax = like_axis % like.ndim() if -like.ndim() <= like_axis < like.ndim() else None
    if ax is None or lax is None:
        raise ValueError(
            f"slice_like: axis {axis} or like_axis {like_axis} is out of range for {x.shape}, {like.shape}"
        )
    if like.shape[lax] > x.shape[ax]:
        raise ValueError(
            f"slice_like: the length {like.shape[lax]} is longer than the table's "
            f"{x.shape[ax]} entries (axis {axis})"
        )
    return SliceLike(ax, lax)(x, like)[0]


def sinusoidal_table(length: int, dim: int, base: float = 10000.0, dtype=np.float32) -> np.ndarray:
    """The (length, dim) sinusoidal encoding of "Attention Is All You Need": column 2i
    is sin(pos / base^(2i/dim)), column 2i+1 cos of the same (dim may be odd)."""
    pos = np.arange(length, dtype=np.float64)[:, None]
    freq = np.exp(-math.log(base) * np.arange(0, dim, 2, dtype=np.float64) / dim)
    table = np.zeros((length, dim))
    table[:, 0::2] = np.sin(pos * freq)
    table[:, 1::2] = np.cos(pos * freq[: dim // 2])
    return table.astype(dtype)
