"""Products of entries: over axes (ONNX ReduceProd) and running along an axis (ONNX
CumProd with ``exclusive`` and ``reverse``).

Both gradients are computed without dividing by x, so zeros in x get their true
gradient (the product of the other factors).

Example::

    p = autograd.reduce_prod(x, [1], keepdims=0)
    c = autograd.cumprod(x, 0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from singa.autograd.engine import Operation
from singa.autograd.shaping import check_axis
from singa.device import array_module
from singa.tensor import Tensor

__all__ = ["reduce_prod", "cumprod"]


def _exclusive(xp: Any, a: Any, reverse: bool) -> Any:
    """Products along the last axis of all entries before (after, ``reverse``) each."""
    ones = xp.ones(a.shape[:-1] + (1,), dtype=a.dtype)
    if reverse:
        return xp.flip(_exclusive(xp, xp.flip(a, -1), False), -1)
    return xp.cumprod(xp.concatenate([ones, a[..., :-1]], axis=-1), axis=-1, dtype=a.dtype)


class ReduceProd(Operation):
    """y = product of x over ``axes`` (all when None); dx = dy * product of the others."""

    def __init__(self, axes: tuple | None = None, keepdims: bool = True):
        super().__init__()
        self.axes = axes
        self.keepdims = bool(keepdims)

    def forward(self, x):
        if self.requires_grad:
            self.cache = x
        return array_module(x).prod(x, axis=self.axes, keepdims=self.keepdims, dtype=x.dtype)

    def backward(self, dy):
        x = self.cache
        xp = array_module(x)
        axes = tuple(range(x.ndim)) if self.axes is None else self.axes
        rest = [d for d in range(x.ndim) if d not in axes]
        order = rest + list(axes)
        moved = xp.transpose(x, order)
        flat = moved.reshape(moved.shape[: len(rest)] + (-1,))
        others = _exclusive(xp, flat, False) * _exclusive(xp, flat, True)
        kept = tuple(1 if d in axes else s for d, s in enumerate(x.shape))
        g = xp.transpose(dy.reshape(kept), order).reshape(flat.shape[:-1] + (1,))
        dx = (others * g).reshape(moved.shape)
        return xp.ascontiguousarray(xp.transpose(dx, np.argsort(order)))


def reduce_prod(x: Tensor, axes: Sequence[int] | int | None = None, keepdims: int = 1) -> Tensor:
    """The product of the entries of ``x`` over ``axes`` (all when None or empty), the
    reduced axes kept with size 1 when ``keepdims`` (ONNX ReduceProd)."""
    if axes is not None:
        given = [int(axes)] if isinstance(axes, int | np.integer) else [int(a) for a in axes]
        norm = sorted({check_axis(a, x.ndim(), "reduce_prod") for a in given})
        if len(norm) != len(given):
            raise ValueError(f"reduce_prod: repeated axes in {given}")
        axes = tuple(norm) or None
    return ReduceProd(axes, bool(keepdims))(x)[0]


def _cumprod_last(xp: Any, a: Any, exclusive: bool, reverse: bool) -> Any:
    """Running products along the last axis."""
    if exclusive:
        return _exclusive(xp, a, reverse)
    if reverse:
        return xp.flip(xp.cumprod(xp.flip(a, -1), axis=-1, dtype=a.dtype), -1)
    return xp.cumprod(a, axis=-1, dtype=a.dtype)


def _cumprod_grad(xp: Any, a: Any, dy: Any) -> Any:
    """d/da of the inclusive running products of ``a`` (last axis) applied to dy:
    dx_i = sum over j >= i of dy_j * prod of a_k for k <= j, k != i."""
    n = a.shape[-1]
    before = _exclusive(xp, a, False)
    dx = xp.zeros_like(a)
    for i in range(n):
        run = before[..., i]
        acc = dy[..., i] * run
        for j in range(i + 1, n):
            run = run * a[..., j]
            acc = acc + dy[..., j] * run
        dx[..., i] = acc
    return dx


class CumProd(Operation):
    """y = running products of x along ``axis`` (``exclusive``: each leaving out its own
    entry; ``reverse``: from the end). The gradient takes O(n^2) products per row
    and never divides by x."""

    def __init__(self, axis: int, exclusive: bool = False, reverse: bool = False):
        super().__init__()
        self.axis = int(axis)
        self.exclusive = bool(exclusive)
        self.reverse = bool(reverse)

    def forward(self, x):
        xp = array_module(x)
        a = xp.moveaxis(x, self.axis, -1)
        if self.requires_grad:
            self.cache = a
        y = _cumprod_last(xp, a, self.exclusive, self.reverse)
        return xp.ascontiguousarray(xp.moveaxis(y, -1, self.axis))

    def backward(self, dy):
        xp = array_module(dy)
        a = self.cache
        g = xp.moveaxis(dy, self.axis, -1)
        if self.reverse:
            a, g = xp.flip(a, -1), xp.flip(g, -1)
        if self.exclusive:  # y = inclusive products of (1, a_0, ..., a_{n-2})
            ones = xp.ones(a.shape[:-1] + (1,), dtype=a.dtype)
            da = _cumprod_grad(xp, xp.concatenate([ones, a[..., :-1]], -1), g)
            da = xp.concatenate([da[..., 1:], xp.zeros_like(ones)], -1)
        else:
            da = _cumprod_grad(xp, a, g)
        if self.reverse:
            da = xp.flip(da, -1)
        return xp.ascontiguousarray(xp.moveaxis(da, -1, self.axis))


def cumprod(x: Tensor, axis: int, exclusive: bool = False, reverse: bool = False) -> Tensor:
    """Running products along ``axis`` (negative counts from the end), as ONNX CumProd."""
    return CumProd(check_axis(axis, x.ndim(), "cumprod"), exclusive, reverse)(x)[0]
