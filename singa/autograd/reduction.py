"""Reductions: sum, mean and max over axes (ONNX ReduceSum/ReduceMean/ReduceMax, and
PyTorch-like ``sum``/``mean``).

Note: this module defines ``sum``, which shadows the builtin here; use
``builtins.sum`` inside it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from singa.autograd.engine import Operation
from singa.autograd.linalg import ones_vector
from singa.device import array_module
from singa.tensor import Tensor

__all__ = ["reduce_sum", "reduce_mean", "reduce_max", "sum", "mean", "cumsum"]


def _norm_axes(x: Tensor, axes: Any, op: str) -> tuple | None:
    """Axes as a sorted tuple of non-negative ints; None (or empty) means all axes."""
    if axes is None:
        return None
    if isinstance(axes, Tensor):
        raise TypeError(f"{op}: axes must be an int, a sequence of ints or None, got a Tensor")
    given = [int(axes)] if isinstance(axes, int | np.integer) else [int(a) for a in axes]
    if not given:
        return None
    r = x.ndim()
    out = set()
    for a in given:
        if not -r <= a < r:
            raise ValueError(f"{op}: axis {a} is out of range for a tensor of shape {x.shape}")
        out.add(a + r if a < 0 else a)
    if len(out) != len(given):
        raise ValueError(f"{op}: repeated axes in {given}")
    return tuple(sorted(out))


class _Reduce(Operation):
    """Shared attributes and gradient broadcast of the reductions."""

    def __init__(self, axes: tuple | None = None, keepdims: bool = True):
        super().__init__()
        self.axes = axes
        self.keepdims = bool(keepdims)

    def _kept_shape(self, shape: tuple) -> tuple:
        axes = range(len(shape)) if self.axes is None else self.axes
        return tuple(1 if i in axes else d for i, d in enumerate(shape))

    def _spread(self, dy: Any, shape: tuple, scale: float | None = None) -> Any:
        """dy (reduced shape) repeated over ``shape`` as a fresh writable array."""
        xp = array_module(dy)
        dk = dy.reshape(self._kept_shape(shape))
        if scale is not None:
            dk = dk * scale
        out = xp.empty(shape, dtype=dy.dtype)
        out[...] = dk
        return out


def _sum(x: Any, axes: tuple | None, keepdims: bool) -> Any:
    """x.sum over ``axes``; a leading or trailing block of axes of a float array goes
    through BLAS (``ones @ x2`` / ``x2 @ ones``), several times faster on the CPU."""
    xp = array_module(x)
    r = x.ndim
    ax = tuple(range(r)) if axes is None else axes
    k = len(ax)
    if (
        x.dtype.kind == "f"
        and x.size
        and 0 < k < r
        and (ax == tuple(range(k)) or ax == tuple(range(r - k, r)))
    ):
        lead = ax[0] == 0
        p = math.prod(x.shape[i] for i in ax)
        if lead:
            out = ones_vector(x, p) @ x.reshape(p, -1)
        else:
            out = x.reshape(-1, p) @ ones_vector(x, p)
        shape = tuple(1 if i in ax else d for i, d in enumerate(x.shape)) if keepdims else _drop(x.shape, ax)
        return out.reshape(shape)
    return xp.asarray(x.sum(axis=axes, keepdims=keepdims))


class ReduceSum(_Reduce):
    """y = sum of x over ``axes`` (all when None)."""

    def forward(self, x):
        if self.requires_grad:
            self.cache = x.shape
        return _sum(x, self.axes, self.keepdims)

    def backward(self, dy):
        return self._spread(dy, self.cache)


class ReduceMean(_Reduce):
    """y = mean of x over ``axes`` (all when None)."""

    def forward(self, x):
        if self.requires_grad:
            self.cache = x.shape
        if x.dtype.kind != "f":
            return array_module(x).asarray(x.mean(axis=self.axes, keepdims=self.keepdims))
        n = math.prod(x.shape) // max(math.prod(self._kept_shape(x.shape)), 1)
        y = _sum(x, self.axes, self.keepdims)  # a fresh array
        y /= n
        return y

    def backward(self, dy):
        shape = self.cache
        n = math.prod(shape) // max(math.prod(self._kept_shape(shape)), 1)
        return self._spread(dy, shape, 1.0 / n if n else 0.0)


class ReduceMax(_Reduce):
    """y = max of x over ``axes``; the gradient is split equally among tied maxima."""

    def forward(self, x):
        xp = array_module(x)
        yk = x.max(axis=self.axes, keepdims=True)
        if self.requires_grad:
            mask = x == yk
            count = mask.sum(axis=self.axes, keepdims=True)
            self.cache = (mask, count)
        return xp.asarray(yk if self.keepdims else yk.reshape(_drop(yk.shape, self.axes)))

    def backward(self, dy):
        mask, count = self.cache
        return mask * (dy.reshape(count.shape) / count.astype(dy.dtype))


def _drop(shape: tuple, axes: tuple | None) -> tuple:
    if axes is None:
        return ()
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def reduce_sum(x: Tensor, axes: Sequence[int] | int | None = None, keepdims: int = 1) -> Tensor:
    """ONNX ReduceSum: sum over ``axes`` (a list; None or empty: all axes; negative
    axes count from the end), keeping the reduced axes as size 1 when ``keepdims``."""
    return ReduceSum(_norm_axes(x, axes, "reduce_sum"), keepdims)(x)[0]


def reduce_mean(x: Tensor, axes: Sequence[int] | int | None = None, keepdims: int = 1) -> Tensor:
    """ONNX ReduceMean: mean over ``axes`` (None: all), see :func:`reduce_sum`."""
    return ReduceMean(_norm_axes(x, axes, "reduce_mean"), keepdims)(x)[0]


def reduce_max(x: Tensor, axes: Sequence[int] | int | None = None, keepdims: int = 1) -> Tensor:
    """ONNX ReduceMax: maximum over ``axes`` (None: all), see :func:`reduce_sum`. The
    gradient goes to the maxima, split equally among ties."""
    if x.size() == 0:
        raise ValueError(f"reduce_max: empty tensor of shape {x.shape}")
    return ReduceMax(_norm_axes(x, axes, "reduce_max"), keepdims)(x)[0]


def _split_args(op: str, args: tuple, axis: Any, keepdims: bool) -> tuple[tuple, Any, bool]:
    """sum/mean's positional arguments: the leading Tensors, then ``axis`` and
    ``keepdims`` (given positionally or by keyword, not both)."""
    n = 0
    while n < len(args) and isinstance(args[n], Tensor):
        n += 1
    tensors, rest = args[:n], args[n:]
    if not tensors:
        raise TypeError(f"{op}: the first argument must be a Tensor, got {args[:1]!r}")
    if len(rest) > 2 or (rest and axis is not None):
        raise TypeError(f"{op}: takes Tensors, then at most axis and keepdims, got {len(args)} arguments")
    if rest:
        axis = rest[0]
    if len(rest) == 2:
        keepdims = rest[1]
    if n > 1 and (axis is not None or keepdims):
        raise ValueError(
            f"{op}: {n} tensors are combined elementwise (SINGA's {op}(a, b, ...)); "
            "axis and keepdims apply to a single tensor"
        )
    return tensors, axis, bool(keepdims)


def _elementwise(op: str, xs: tuple) -> Tensor:
    """SINGA's ``sum(a, b, ...)`` / ``mean(a, b, ...)``: the variadic operator over
    tensors of one dtype (floating for the mean) that broadcast together."""
    import singa.autograd.variadic as variadic

    dtypes = {x.dtype for x in xs}
    if len(dtypes) > 1:
        raise ValueError(f"{op}: needs tensors of one dtype, got {', '.join(str(d) for d in dtypes)}")
    if op == "mean" and xs[0].dtype.kind != "f":
        raise ValueError(f"mean: needs floating-point tensors, got {xs[0].dtype}")
    np.broadcast_shapes(*(tuple(x.shape) for x in xs))
    cls = variadic.Sum if op == "sum" else variadic.Mean
    return cls()(*xs)[0]


def sum(*args: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """``sum(x, axis=None, keepdims=False)``: sum of one tensor over ``axis`` (an int,
    a tuple, or None for all), PyTorch-style: the reduced axes are dropped unless
    ``keepdims``. ``sum(a, b, ...)`` with several tensors: their elementwise sum
    (SINGA's form; they broadcast together and share one dtype)."""
    xs, axis, keepdims = _split_args("sum", args, axis, keepdims)
    if len(xs) > 1:
        return _elementwise("sum", xs)
    return ReduceSum(_norm_axes(xs[0], axis, "sum"), keepdims)(xs[0])[0]


def mean(*args: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """``mean(x, axis=None, keepdims=False)``: mean of one tensor over ``axis`` (an int,
    a tuple, or None for all), PyTorch-style: the reduced axes are dropped unless
    ``keepdims``. ``mean(a, b, ...)`` with several tensors: their elementwise mean
    (SINGA's form; they broadcast together and share one floating dtype)."""
    xs, axis, keepdims = _split_args("mean", args, axis, keepdims)
    if len(xs) > 1:
        return _elementwise("mean", xs)
    return ReduceMean(_norm_axes(xs[0], axis, "mean"), keepdims)(xs[0])[0]


def _scan(a: Any, axis: int, exclusive: bool, reverse: bool) -> Any:
    """Running sums of ``a`` along ``axis`` (from the end when ``reverse``; each leaving
    out its own element when ``exclusive``), in ``a``'s dtype."""
    xp = array_module(a)
    if reverse:
        a = xp.flip(a, axis)
    y = xp.cumsum(a, axis=axis, dtype=a.dtype)
    if exclusive:
        shifted = xp.zeros_like(y)
        src = [slice(None)] * a.ndim
        dst = [slice(None)] * a.ndim
        src[axis], dst[axis] = slice(0, -1), slice(1, None)
        shifted[tuple(dst)] = y[tuple(src)]
        y = shifted
    return xp.ascontiguousarray(xp.flip(y, axis)) if reverse else y


class CumSum(Operation):
    """y = running sums of x along ``axis`` (ONNX CumSum with ``exclusive`` and
    ``reverse``); the gradient is the running sum of dy in the other direction."""

    def __init__(self, axis: int, exclusive: bool = False, reverse: bool = False):
        super().__init__()
        self.axis = int(axis)
        self.exclusive = bool(exclusive)
        self.reverse = bool(reverse)

    def forward(self, x):
        return _scan(x, self.axis, self.exclusive, self.reverse)

    def backward(self, dy):
        return _scan(dy, self.axis, self.exclusive, not self.reverse)


def cumsum(x: Tensor, axis: int, exclusive: bool = False, reverse: bool = False) -> Tensor:
    """Running sums along ``axis`` (negative counts from the end), as ONNX CumSum."""
    r = x.ndim()
    if not -r <= int(axis) < r:
        raise ValueError(f"cumsum: axis {axis} is out of range for a tensor of shape {x.shape}")
    return CumSum(int(axis) % r, exclusive, reverse)(x)[0]
