"""Indexing operators: gather, where and ``x[key]`` (getitem).

Forward results of getitem with basic keys (ints, slices, None, Ellipsis) share memory
with their input, as numpy views do; gradients of repeated indices accumulate.
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from singa.autograd.engine import Operation, array_module, unbroadcast
from singa.autograd.shape import check_axis, lift, scatter_add
from singa.tensor import Tensor

__all__ = ["gather", "where", "getitem"]

_slice = builtins.slice


class Gather(Operation):
    """ONNX Gather: y = take(x, indices, axis); gradient scatter-added into zeros."""

    def __init__(self, axis: int = 0):
        super().__init__()
        self.axis = axis

    def forward(self, x, indices):
        xp = array_module(x)
        if indices.dtype.kind not in "iu":
            indices = indices.astype(np.int64)
        if self.requires_grad:
            self.cache = (x.shape, indices)
        return xp.take(x, indices, axis=self.axis)

    def backward(self, dy):
        if not self.needs_grad[0]:
            return None, None
        shape, idx = self.cache
        xp = array_module(dy)
        dx = xp.zeros(shape, dtype=dy.dtype)
        scatter_add(xp, dx, (_slice(None),) * self.axis + (idx,), dy)
        return dx, None


def gather(x: Tensor, axis: int, indices: Any) -> Tensor:
    """ONNX Gather: pick the entries ``indices`` (an int, list, array or integer
    Tensor; negative values count from the end) of ``x`` along ``axis``. The result
    has shape x.shape[:axis] + indices.shape + x.shape[axis + 1:]."""
    ax = check_axis(axis, x.ndim(), "gather")
    ind = lift(indices, x, dtype=None if isinstance(indices, Tensor) else np.int64)
    n = x.shape[ax]
    if ind.size():
        lo, hi = int(ind.data.min()), int(ind.data.max())
        if lo < -n or hi >= n:
            raise ValueError(
                f"gather: indices in [{lo}, {hi}] are out of range for axis {axis} of shape {x.shape}"
            )
    return Gather(ax)(x, ind)[0]


class Where(Operation):
    """y = x where condition else y (condition not differentiated)."""

    def forward(self, x, y, c):
        if c.dtype != bool:
            c = c.astype(bool)
        if self.requires_grad:
            self.cache = (x.shape, y.shape, c)
        return array_module(x).where(c, x, y)

    def backward(self, dy):
        sx, sy, c = self.cache
        xp = array_module(dy)
        dx = unbroadcast(xp.where(c, dy, 0), sx) if self.needs_grad[0] else None
        dyy = unbroadcast(xp.where(c, 0, dy), sy) if self.needs_grad[1] else None
        return dx, dyy, None


def where(x: Any, y: Any, condition: Any) -> Tensor:
    """``condition ? x : y`` elementwise with broadcasting (SINGA's argument order).
    ``condition`` is a bool or numeric Tensor or array (nonzero means true) and gets no
    gradient; ``x`` or ``y`` may be a number."""
    like = x if isinstance(x, Tensor) else y
    if not isinstance(like, Tensor):
        raise ValueError("where: x or y must be a Tensor")
    x, y = lift(x, like), lift(y, like)
    c = lift(condition, like, dtype=None if isinstance(condition, Tensor) else bool)
    try:
        np.broadcast_shapes(tuple(x.shape), tuple(y.shape), tuple(c.shape))
    except ValueError:
        raise ValueError(
            f"where: shapes x {x.shape}, y {y.shape} and condition {c.shape} do not broadcast"
        ) from None
    return Where()(x, y, c)[0]


def _is_basic(k: Any) -> bool:
    return k is None or k is Ellipsis or isinstance(k, int | np.integer | _slice)


class GetItem(Operation):
    """y = x[key]; the gradient is scattered back into zeros of x's shape (added up
    where an advanced index repeats an entry)."""

    def __init__(self, key: tuple):
        super().__init__()
        self.key = key
        self.basic = all(_is_basic(k) for k in key)

    def forward(self, x):
        if self.requires_grad:
            self.cache = x.shape
        return array_module(x).asarray(x[self.key])

    def backward(self, dy):
        xp = array_module(dy)
        dx = xp.zeros(self.cache, dtype=dy.dtype)
        if self.basic:
            dx[self.key] = dy
        else:
            scatter_add(xp, dx, self.key, dy)
        return dx


def getitem(x: Tensor, key: Any) -> Tensor:
    """``x[key]`` (what ``Tensor.__getitem__`` calls): basic indexing with ints,
    slices, None and Ellipsis; integer or boolean arrays, lists and Tensors also work
    (numpy's advanced indexing)."""
    key = key if isinstance(key, tuple) else (key,)
    xp = x.device.xp
    conv = []
    for k in key:
        if isinstance(k, Tensor):
            k = k.data
        elif isinstance(k, list) or (isinstance(k, np.ndarray) and xp is not np):
            k = xp.asarray(k)
        conv.append(k)
    return GetItem(tuple(conv))(x)[0]
