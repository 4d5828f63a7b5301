"""Indexing by index tensors: gathering elements along an axis, gathering and
scattering slices addressed by index tuples (ONNX GatherElements, GatherND,
ScatterND).

``gather_elements(x, idx, axis)`` has idx's shape: ``y[j] = x[j with its axis
coordinate replaced by idx[j]]``. ``gather_nd(x, idx, batch_dims)`` reads the slices
of ``x`` whose leading coordinates are the last axis of ``idx``; ``scatter_nd``
writes (or combines) updates into such slices of a copy of ``x``. Indices may be
negative (counted from the end of their axis); out of range ones raise ValueError
before anything runs. Gradients of repeated indices accumulate.

Example::

    y = autograd.gather_elements(x, idx, axis=1)      # y[i][j] = x[i][idx[i][j]]
    z = autograd.gather_nd(x, [[0, 1], [1, 0]])       # z = [x[0, 1], x[1, 0]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.autograd.engine import Operation
from singa.autograd.shaping import check_axis, lift, scatter_add
from singa.device import array_module
from singa.tensor import Tensor

__all__ = ["gather_elements", "gather_nd", "scatter_nd"]

#: ScatterND reductions and the numpy ufunc each applies
REDUCTIONS = {"add": "add", "mul": "multiply", "max": "maximum", "min": "minimum"}


def _check_range(name: str, idx: Any, n: int, what: str) -> None:
    if idx.size:
        lo, hi = int(idx.min()), int(idx.max())
        if lo < -n or hi >= n:
            raise ValueError(f"{name}: indices in [{lo}, {hi}] are out of range for {what} of size {n}")


def _axis_key(xp: Any, idx: Any, axis: int, n: int) -> tuple:
    """The advanced-index key reading element ``j`` of an ``idx``-shaped array from
    position ``idx[j]`` on ``axis`` and ``j``'s own position on the other axes."""
    idx = xp.where(idx < 0, idx + n, idx)
    key = []
    for d, s in enumerate(idx.shape):
        if d == axis:
            key.append(idx)
        else:
            shape = [1] * idx.ndim
            shape[d] = s
            key.append(xp.arange(s).reshape(shape))
    return tuple(key)


class GatherElements(Operation):
    """ONNX GatherElements: y[j] = x[key(j)] (see :func:`gather_elements`); the gradient
    of x adds dy up at the positions read."""

    def __init__(self, axis: int = 0):
        super().__init__()
        self.axis = axis

    def forward(self, x, indices):
        xp = array_module(x)
        key = _axis_key(xp, indices.astype(np.int64, copy=False), self.axis, x.shape[self.axis])
        if self.requires_grad:
            self.cache = (x.shape, key)
        return x[key]

    def backward(self, dy):
        shape, key = self.cache
        xp = array_module(dy)
        dx = xp.zeros(shape, dtype=dy.dtype)
        scatter_add(xp, dx, key, dy)
        return dx, None


def gather_elements(x: Tensor, indices: Any, axis: int = 0) -> Tensor:
    """ONNX GatherElements: ``indices`` (integers of x's rank, no larger than x off
    ``axis``) picks, for each of its positions j, the element of ``x`` at j with the
    ``axis`` coordinate replaced by ``indices[j]``. The result has indices' shape."""
    ax = check_axis(axis, x.ndim(), "gather_elements")
    ind = lift(indices, x, np.int64)
    ok = ind.ndim() == x.ndim() and all(i <= s for d, (i, s) in enumerate(zip(ind.shape, x.shape)) if d != ax)
    if not ok or ind.dtype.kind not in "iu":
        raise ValueError(
            f"gather_elements: indices must be integers of x's rank, no larger than x off axis {axis}; "
            f"got x {x.shape}, indices {ind.shape} {ind.dtype}"
        )
    _check_range("gather_elements", ind.data, x.shape[ax], f"axis {axis}")
    return GatherElements(ax)(x, ind)[0]


def _nd_key(xp: Any, shape: tuple, idx: Any, batch_dims: int) -> tuple:
    """The advanced-index key of GatherND/ScatterND on an array of ``shape``:
    the batch axes counted along, then the coordinates in idx's last axis."""
    b = batch_dims
    lead = idx.shape[:-1]
    key = []
    for d in range(b):
        s = [1] * len(lead)
        s[d] = lead[d]
        key.append(xp.broadcast_to(xp.arange(lead[d]).reshape(s), lead))
    for i in range(idx.shape[-1]):
        n = shape[b + i]
        c = idx[..., i]
        key.append(xp.where(c < 0, c + n, c))
    return tuple(key)


class GatherND(Operation):
    """ONNX GatherND: the slices of x at the index tuples in the last axis of
    ``indices`` (after ``batch_dims`` shared leading axes); the gradient of x adds dy
    up at the slices read."""

    def __init__(self, batch_dims: int = 0):
        super().__init__()
        self.batch_dims = batch_dims

    def forward(self, x, indices):
        xp = array_module(x)
        key = _nd_key(xp, x.shape, indices.astype(np.int64, copy=False), self.batch_dims)
        if self.requires_grad:
            self.cache = (x.shape, key)
        return x[key]

    def backward(self, dy):
        shape, key = self.cache
        xp = array_module(dy)
        dx = xp.zeros(shape, dtype=dy.dtype)
        scatter_add(xp, dx, key, dy)
        return dx, None


def _check_nd(name: str, x: Tensor, ind: Tensor, batch_dims: int) -> None:
    k = ind.shape[-1] if ind.ndim() else 0
    ok = ind.ndim() >= 1 and ind.dtype.kind in "iu" and 0 <= batch_dims < min(x.ndim(), ind.ndim())
    ok = ok and batch_dims + k <= x.ndim() and tuple(ind.shape[:batch_dims]) == tuple(x.shape[:batch_dims])
    if not ok:
        raise ValueError(
            f"{name}: indices must be integers whose last axis (of length <= rank - batch_dims) indexes x, "
            f"sharing x's first {batch_dims} axes; got x {x.shape}, indices {ind.shape} {ind.dtype}"
        )
    for i in range(k):
        _check_range(name, ind.data[..., i], x.shape[batch_dims + i], f"axis {batch_dims + i}")


def gather_nd(x: Tensor, indices: Any, batch_dims: int = 0) -> Tensor:
    """ONNX GatherND: ``indices`` of shape (b..., m..., k) picks, per batch position
    (the first ``batch_dims`` axes, shared with ``x``), the slices
    ``x[b..., i_1, ..., i_k]``; shape b... + m... + x.shape[batch_dims + k:]."""
    ind = lift(indices, x, np.int64)
    _check_nd("gather_nd", x, ind, int(batch_dims))
    return GatherND(int(batch_dims))(x, ind)[0]


class ScatterND(Operation):
    """ONNX ScatterND: y = x with the slices at the index tuples of ``indices`` set to
    ``updates`` ("none") or combined with them ("add", "mul", "max", "min"). Only
    "none" and "add" are differentiated: dx = dy with the written slices zeroed
    ("none") or dy ("add"); dupdates = dy at those slices."""

    def __init__(self, reduction: str = "none"):
        super().__init__()
        self.reduction = reduction

    def forward(self, x, indices, updates):
        xp = array_module(x)
        key = _nd_key(xp, x.shape, indices.astype(np.int64, copy=False), 0)
        y = x.copy()
        if self.reduction == "none":
            y[key] = updates
        else:
            getattr(xp, REDUCTIONS[self.reduction]).at(y, key, updates)
        if self.requires_grad:
            self.cache = key
        return y

    def backward(self, dy):
        if self.reduction not in ("none", "add"):
            raise NotImplementedError(f"scatter_nd: no gradient for reduction {self.reduction!r}")
        key = self.cache
        dx = du = None
        if self.needs_grad[0]:
            dx = dy
            if self.reduction == "none":
                dx = dy.copy()
                dx[key] = 0
        if self.needs_grad[2]:
            du = dy[key]
        return dx, None, du


def scatter_nd(x: Tensor, indices: Any, updates: Any, reduction: str = "none") -> Tensor:
    """ONNX ScatterND: a copy of ``x`` whose slices ``x[i_1, ..., i_k]`` (one per index
    tuple in the last axis of ``indices``, shape (m..., k)) are ``updates`` (shape
    m... + x.shape[k:]), or combined with them by ``reduction`` "add", "mul", "max",
    "min" (repeated tuples combine every update; gradients for "none" and "add")."""
    if reduction not in ("none", *REDUCTIONS):
        raise ValueError(
            f"scatter_nd: reduction must be 'none', 'add', 'mul', 'max' or 'min', got {reduction!r}"
        )
    ind = lift(indices, x, np.int64)
    upd = lift(updates, x)
    _check_nd("scatter_nd", x, ind, 0)
    want = tuple(ind.shape[:-1]) + tuple(x.shape[ind.shape[-1] :])
    if tuple(upd.shape) != want or upd.dtype != x.dtype:
        raise ValueError(
            f"scatter_nd: updates must have shape {want} and x's dtype {x.dtype}, got {upd.shape} {upd.dtype}"
        )
    return ScatterND(reduction)(x, ind, upd)[0]
