"""Index-driven operators: one-hot encoding, the positions of nonzero entries and
scattering values into a tensor along an axis (ONNX OneHot, NonZero, ScatterElements).

Indices may be negative (counted from the end of their axis). Out-of-range scatter
indices raise ValueError naming the operator before anything runs; a one-hot index out
of range gives a row of off-values (ONNX's rule).

Example::

    t = autograd.onehot(-1, labels, 10, [0.0, 1.0])         # (N,) -> (N, 10)
    y = autograd.scatter_elements(x, idx, upd, axis=1)      # y = x; y[i][idx[i][j]] = upd[i][j]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from singa.autograd.engine import Operation, array_module
from singa.tensor import Tensor

__all__ = ["onehot", "nonzero", "scatter_elements", "OneHot", "NonZero"]


def _const(v: Any, like: Tensor, dtype: Any = None) -> Tensor:
    """``v`` (Tensor, array, list or number) as a Tensor on ``like``'s device."""
    if isinstance(v, Tensor):
        return v
    return Tensor._wrap(like.device.xp.asarray(np.asarray(v, dtype=dtype)), like.device)


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
    ind = _const(indices, x, None if isinstance(indices, Tensor) else np.int64)
    upd = _const(updates, x, None if isinstance(updates, Tensor) else x.dtype)
    ax = _check_scatter(x, ind, upd, int(axis), reduction)
    return ScatterElements(ax, reduction)(x, ind, upd)[0]
