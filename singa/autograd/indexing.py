"""Indexing operators: gather, where, ``x[key]`` (getitem), one-hot encoding, the
positions of nonzero entries and scattering values into a tensor along an axis (ONNX
Gather, Where, OneHot, NonZero, ScatterElements).

Forward results of getitem with basic keys (ints, slices, None, Ellipsis) share memory
with their input, as numpy views do; gradients of repeated indices accumulate. An
integer index keeps its axis with size 1 (SINGA's ``Tensor.__getitem__``: ``x[0]`` of
a (3, 4) tensor is (1, 4)).
Indices may be negative (counted from the end of their axis). Out-of-range gather and
scatter indices raise ValueError naming the operator before anything runs; a one-hot
index out of range gives a row of off-values (ONNX's rule).

Example::

    t = autograd.onehot(-1, labels, 10, [0.0, 1.0])         # (N,) -> (N, 10)
    y = autograd.scatter_elements(x, idx, upd, axis=1)      # y = x; y[i][idx[i][j]] = upd[i][j]
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np

from singa.autograd.engine import Operation, unbroadcast
from singa.autograd.shaping import check_axis, lift, scatter_add
from singa.device import array_module
from singa.tensor import Tensor

__all__ = [
    "gather",
    "embedding",
    "where",
    "getitem",
    "onehot",
    "nonzero",
    "scatter_elements",
    "Embedding",
    "OneHot",
    "NonZero",
]

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
        """The gradient of x alone (the indices get none), as SINGA's Gather returns."""
        if not self.needs_grad[0]:
            return None
        shape, idx = self.cache
        xp = array_module(dy)
        dx = xp.zeros(shape, dtype=dy.dtype)
        scatter_add(xp, dx, (_slice(None),) * self.axis + (idx,), dy)
        return dx


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


class Embedding(Operation):
    """SINGA's Embedding operator: y = w[x] (the rows of ``w`` picked by the integer
    indices ``x``), inputs ``(x, w)``. The gradient of ``w`` adds up the rows of dy
    per index; that of ``x`` is zero (the lookup is constant between integers; SINGA
    returns dy summed over its last axis, which is not a derivative). ONNX: Gather."""

    def forward(self, x, w):
        xp = array_module(w)
        idx = x if x.dtype.kind in "iu" else x.astype(np.int64)
        if self.requires_grad:
            self.cache = (x.shape, w.shape, idx)
        return xp.take(w, idx, axis=0)

    def backward(self, dy):
        x_shape, w_shape, idx = self.cache
        xp = array_module(dy)
        dx = xp.zeros(x_shape, dtype=dy.dtype) if self.needs_grad[0] else None
        dw = None
        if self.needs_grad[1]:
            dw = xp.zeros(w_shape, dtype=dy.dtype)
            scatter_add(xp, dw, (idx,), dy)
        return dx, dw


def embedding(x: Tensor, w: Tensor) -> Tensor:
    """The rows of ``w`` (shape (num, dim)) at the integer indices ``x`` (any shape,
    an integer Tensor or whole numbers in a float one): shape x.shape + (dim,).
    SINGA's ``autograd.embedding``; :class:`singa.layer.Embedding` calls it."""
    if w.ndim() != 2:
        raise ValueError(f"embedding: w must be 2-D (num, dim), got shape {w.shape}")
    ind = x.data
    if ind.size:
        if ind.dtype.kind == "f" and bool((ind != ind.astype(np.int64)).any()):
            raise ValueError("embedding: x must hold whole numbers (indices)")
        lo, hi = int(ind.min()), int(ind.max())
        if lo < 0 or hi >= w.shape[0]:
            raise ValueError(f"embedding: indices in [{lo}, {hi}] are out of range for {w.shape[0]} rows")
    return Embedding()(x, w)[0]


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
        return dx, dyy  # the condition gets none: SINGA's Where returns these two


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
    """``x[key]`` (what ``Tensor.__getitem__`` calls), differentiable.

    SINGA's rule for integers: ``x[i]`` keeps the indexed axis with size 1, as the
    slice ``x[i:i+1]`` does (``x[1]`` of a (3, 4) tensor is (1, 4); numpy and PyTorch
    users: drop the axis with ``autograd.squeeze`` or ``reshape``). Negative integers
    count from the end; an integer outside ``[-size, size)`` raises IndexError. Slices
    (with steps, which SINGA ignores), None and Ellipsis follow numpy; integer or
    boolean arrays, lists and Tensors also work (numpy's advanced indexing), and an
    integer next to them still keeps its axis."""
    key = key if isinstance(key, tuple) else (key,)
    xp = x.device.xp
    conv = []
    for k in key:
        if isinstance(k, Tensor):
            k = k.data
        elif isinstance(k, list) or (isinstance(k, np.ndarray) and xp is not np):
            k = xp.asarray(k)
        conv.append(k)
    return GetItem(_keep_int_axes(tuple(conv), tuple(x.shape)))(x)[0]


def _is_int(k: Any) -> bool:
    return isinstance(k, int | np.integer) and not isinstance(k, bool | np.bool_)


def _axes_used(k: Any) -> int:
    """How many input axes the key entry ``k`` (not Ellipsis) indexes."""
    if k is None:
        return 0
    if getattr(k, "dtype", None) == np.bool_:
        return k.ndim
    return 1


def _keep_int_axes(key: tuple, shape: tuple) -> tuple:
    """``key`` with each integer ``i`` replaced by the slice ``i:i+1`` of its axis
    (SINGA's rule: the axis stays, with size 1), after checking it is in range."""
    if not builtins.any(_is_int(k) for k in key):
        return key
    used = builtins.sum(_axes_used(k) for k in key if k is not Ellipsis)
    out, axis = [], 0
    for k in key:
        if k is Ellipsis:
            axis += len(shape) - used
        elif _is_int(k):
            if axis >= len(shape):
                raise IndexError(f"too many indices for a tensor of shape {shape}: {key!r}")
            n, i = shape[axis], int(k)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of range for axis {axis} of size {n}")
            i %= n
            k = _slice(i, i + 1)
        if k is not Ellipsis:
            axis += _axes_used(k)
        out.append(k)
    return tuple(out)


def _check_range(name: str, idx: Any, n: int, what: str) -> None:
    if idx.size:
        lo, hi = int(idx.min()), int(idx.max())
        if lo < -n or hi >= n:
            raise ValueError(f"{name}: indices in [{lo}, {hi}] are out of range for {what} of size {n}")


# ----- onehot ----------------------------------------------------------------------------------
class OneHot(Operation):
    """y[..., k, ...] = values[1] where k == indices[...] (mod depth), values[0] elsewhere
    (everywhere for an index outside [-depth, depth)); the new axis of size ``depth``
    sits at ``axis`` of the output. Not differentiable."""

    def __init__(self, axis: int, depth: int, values: Any):
        super().__init__()
        self.axis = axis
        self.depth = depth
        self.values = values

    def forward(self, indices):
        xp = array_module(indices)
        r = indices.ndim
        axis = self.axis + r + 1 if self.axis < 0 else self.axis
        idx = xp.mod(indices.astype(np.int64), self.depth)
        shape = (1,) * axis + (self.depth,) + (1,) * (r - axis)
        valid = (indices >= -self.depth) & (indices < self.depth)
        hot = xp.expand_dims(xp.where(valid, idx, -1), axis) == xp.arange(self.depth).reshape(shape)
        off, on = xp.asarray(self.values)[0], xp.asarray(self.values)[1]
        return xp.where(hot, on, off)

    def backward(self, dy):
        return None


def onehot(axis: int, indices: Tensor, depth: int | Any, values: Sequence[float] | Any) -> Tensor:
    """One-hot encode ``indices`` (SINGA's argument order; ONNX OneHot): the output has
    a new axis of size ``depth`` at ``axis`` (-1: last), holding ``values[1]`` at each
    index and ``values[0]`` elsewhere; ``depth`` is an int or a one-element array or
    Tensor (ONNX's form). Negative indices count from the end; an index outside
    [-depth, depth) gives ``values[0]`` all along the new axis (ONNX's rule). The
    output takes the dtype of ``values`` when it is an array or Tensor, float32 for a
    list or tuple (SINGA's)."""
    depth_arr = np.asarray(depth.to_numpy() if isinstance(depth, Tensor) else depth).reshape(-1)
    if depth_arr.size != 1:
        raise ValueError(f"onehot: depth must be one number, got {depth_arr.tolist()}")
    depth = int(depth_arr[0])
    r = indices.ndim()
    if depth < 1 or not -r - 1 <= axis <= r:
        raise ValueError(
            f"onehot: needs depth >= 1 and axis in [{-r - 1}, {r}], got depth {depth}, axis {axis}"
        )
    vals = values.to_numpy() if isinstance(values, Tensor) else np.asarray(values)
    if not isinstance(values, Tensor | np.ndarray):
        vals = vals.astype(np.float32)
    if vals.size != 2:
        raise ValueError(f"onehot: values must hold [off_value, on_value], got {vals.tolist()}")
    ind = indices.data
    if ind.dtype.kind == "f" and (ind != ind.astype(np.int64)).any():
        raise ValueError("onehot: indices must be whole numbers")
    return OneHot(int(axis), depth, vals.reshape(2))(indices)[0]


# ----- nonzero ---------------------------------------------------------------------------------
class NonZero(Operation):
    """y = the indices of the nonzero entries of x, shape (x.ndim, count), int64, in
    row-major order (numpy's ``nonzero`` stacked). Not differentiable."""

    def forward(self, x):
        xp = array_module(x)
        if x.ndim == 0:
            return xp.zeros((0, int(bool(x))), dtype=np.int64)
        return xp.stack(xp.nonzero(x)).astype(np.int64, copy=False)

    def backward(self, dy):
        return None


def nonzero(x: Tensor) -> Tensor:
    """The positions of the nonzero entries of ``x`` as an int64 tensor of shape
    (x.ndim, count) (ONNX NonZero; SINGA gives int32)."""
    return NonZero()(x)[0]


# ----- scatter_elements ------------------------------------------------------------------------
def _scatter_key(xp: Any, idx: Any, axis: int, n: int) -> tuple:
    """The advanced-index key that puts element ``j`` of an ``idx``-shaped array at
    position ``idx[j]`` along ``axis`` and at ``j``'s own position along the others."""
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


_UFUNCS = {"add": "add", "mul": "multiply", "max": "maximum", "min": "minimum"}


def _ufunc_at(xp: Any, name: str, a: Any, key: tuple, v: Any) -> None:
    """``xp.<name>.at(a, key, v)`` (unbuffered: repeated positions combine every value),
    through cupyx's scatter functions on cupy versions without ``ufunc.at``."""
    ufunc = getattr(xp, name)
    if hasattr(ufunc, "at"):
        ufunc.at(a, key, v)
        return
    import cupyx  # pragma: no cover - old cupy

    scatter = {"add": "scatter_add", "maximum": "scatter_max", "minimum": "scatter_min"}.get(name)
    if scatter is None:
        raise NotImplementedError(f"scatter_elements: reduction {name!r} needs a cupy with ufunc.at")
    getattr(cupyx, scatter)(a, key, v)


class ScatterElements(Operation):
    """ONNX ScatterElements: y = x with y[key(j)] = updates[j] ("none"), or combined
    with it by "add", "mul", "max" or "min", key(j) putting ``indices[j]`` on ``axis``.
    Only "none" and "add" are differentiated (backward raises NotImplementedError for
    the others).

    Gradients: dx = dy with the overwritten positions zeroed ("none") or dy ("add");
    dupdates = dy gathered at the same positions (as PyTorch's scatter, which assumes
    distinct positions: under "none" repeated positions all receive that position's dy).

    SINGA's form ``ScatterElements(indices, updates, axis)(x)`` is
    :class:`singa.autograd.operators.ScatterElements`.
    """

    def __init__(self, axis: int = 0, reduction: str = "none"):
        super().__init__()
        self.axis = axis
        self.reduction = reduction

    def forward(self, x, indices, updates):
        xp = array_module(x)
        ax = self.axis % x.ndim
        key = _scatter_key(xp, indices.astype(np.int64, copy=False), ax, x.shape[ax])
        y = x.copy()
        if self.reduction == "none":
            y[key] = updates
        else:
            _ufunc_at(xp, _UFUNCS[self.reduction], y, key, updates)
        if self.requires_grad:
            self.cache = key
        return y

    def backward(self, dy):
        if self.reduction not in ("none", "add"):
            raise NotImplementedError(
                f"scatter_elements: no gradient for reduction {self.reduction!r} (only 'none' and 'add')"
            )
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


def _check_scatter(x: Tensor, ind: Tensor, upd: Tensor, axis: int, reduction: str) -> int:
    r = x.ndim()
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise ValueError(
            f"scatter_elements: reduction must be 'none', 'add', 'mul', 'max' or 'min', got {reduction!r}"
        )
    if not -r <= axis < r:
        raise ValueError(f"scatter_elements: axis {axis} is out of range for x of shape {x.shape}")
    ax = axis % r
    ok = ind.shape == upd.shape and ind.ndim() == r
    ok = ok and all(i <= s for d, (i, s) in enumerate(zip(ind.shape, x.shape)) if d != ax)
    if not ok or ind.dtype.kind not in "iu" or upd.dtype != x.dtype:
        raise ValueError(
            f"scatter_elements: needs integer indices and updates (of x's dtype {x.dtype}) of one shape, "
            f"of x's rank and no larger than x off the axis; got x {x.shape}, indices {ind.shape} "
            f"{ind.dtype}, updates {upd.shape} {upd.dtype}"
        )
    _check_range("scatter_elements", ind.data, x.shape[ax], f"axis {axis}")
    return ax


def scatter_elements(x: Tensor, indices: Any, updates: Any, axis: int = 0, reduction: str = "none") -> Tensor:
    """ONNX ScatterElements: a copy of ``x`` in which, for every position j of
    ``indices``, the element at j with its ``axis`` coordinate replaced by
    ``indices[j]`` is set to ``updates[j]`` (``reduction`` "add", "mul", "max", "min":
    combined with it; repeated positions combine every update; only "none" and "add"
    have gradients).
    ``indices`` (integers, may be negative) and ``updates`` have one shape, of x's
    rank; both may be Tensors, arrays or lists. ``x`` and ``updates`` are
    differentiated."""
    ind = lift(indices, x, np.int64)
    upd = lift(updates, x)
    ax = _check_scatter(x, ind, upd, int(axis), reduction)
    return ScatterElements(ax, reduction)(x, ind, upd)[0]
