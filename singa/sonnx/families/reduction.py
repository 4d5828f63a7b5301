"""Reductions (:mod:`singa.autograd.reduction`): ONNX export and import."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa import autograd
from singa.autograd import elementwise, reduction
from singa.sonnx.context import ExportContext, NodeContext, builds, keep_dtype
from singa.tensor import Tensor

# ----- export --------------------------------------------------------------------------------


def _reduce_converter(op_type: str, since: int):
    def convert(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
        extra, attrs = ctx.axes_arg(op_type, op.axes, since=since)
        ctx.node(op_type, ins + extra, outs, keepdims=int(op.keepdims), **attrs)

    convert.__name__ = f"convert_{op_type.lower()}"
    return convert


def convert_cumsum(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """CumSum with its axis as a constant input."""
    axis = ctx.const(np.asarray(op.axis, np.int64), hint="axis")
    ctx.node("CumSum", [ins[0], axis], outs, exclusive=int(op.exclusive), reverse=int(op.reverse))


# ----- import --------------------------------------------------------------------------------


def _reduce_handler(fn, axes_input_since: int, *ops: type):
    @builds(*ops)
    def handle(ctx: NodeContext, xs: list) -> Tensor:
        x = xs[0]
        if ctx.opset >= axes_input_since:
            axes = ctx.static(xs[1]) if len(xs) > 1 else None
            axes = None if axes is None else [int(a) for a in axes.reshape(-1)]
        else:
            axes = ctx.attr("axes")
        keep = int(ctx.attr("keepdims", 1))
        if not axes:
            if int(ctx.attr("noop_with_empty_axes", 0)):
                return x
            axes = None
        if x.size() == 0:
            return _reduce_empty(ctx, fn, x, axes, keep)
        y = fn(x, axes, keep)
        return keep_dtype(y, x.dtype)

    return handle


def _reduce_empty(ctx: NodeContext, fn: Any, x: Tensor, axes: Any, keep: int) -> Tensor:
    """Reductions of empty tensors: sums are 0, maxima the lowest value, minima the
    highest, logarithms of sums minus infinity (ONNX)."""
    xp = ctx.device.xp
    ax = None if axes is None else tuple(int(a) % x.ndim() for a in axes)
    if fn is autograd.reduce_max:
        low = False if x.dtype == bool else (-np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min)
        y = xp.max(x.data, axis=ax, keepdims=bool(keep), initial=low)
    elif fn is reduce_min:
        high = True if x.dtype == bool else (np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).max)
        y = xp.min(x.data, axis=ax, keepdims=bool(keep), initial=high)
    elif fn is autograd.reduce_mean:
        with np.errstate(invalid="ignore", divide="ignore"):
            y = xp.mean(x.data, axis=ax, keepdims=bool(keep))
    else:
        y = xp.sum(x.data, axis=ax, keepdims=bool(keep))
        if fn in (reduce_log_sum, reduce_log_sum_exp):
            y = xp.full(y.shape, -np.inf)
    return ctx.wrap(xp.asarray(y).astype(x.dtype))


def reduce_min(x: Tensor, axes: Any, keep: int) -> Tensor:
    """Minimum: ``-max(-x)`` for floats (differentiable), computed directly otherwise."""
    if x.dtype.kind != "f":
        ax = None if axes is None else tuple(axes)
        return Tensor.wrap(x.device.xp.asarray(x.data.min(axis=ax, keepdims=bool(keep))), x.device)
    return autograd.neg(autograd.reduce_max(autograd.neg(x), axes, keep))


def reduce_l1(x: Tensor, axes: Any, keep: int) -> Tensor:
    """Sum of absolute values."""
    return autograd.reduce_sum(autograd.abs(x), axes, keep)


def reduce_sum_square(x: Tensor, axes: Any, keep: int) -> Tensor:
    """Sum of squares."""
    return autograd.reduce_sum(autograd.mul(x, x), axes, keep)


def reduce_l2(x: Tensor, axes: Any, keep: int) -> Tensor:
    """Square root of the sum of squares (in float64 for integers, as ONNX's reference)."""
    if x.dtype.kind != "f":
        return autograd.cast(reduce_l2(autograd.cast(x, np.float64), axes, keep), x.dtype)
    return autograd.sqrt(reduce_sum_square(x, axes, keep))


def reduce_log_sum(x: Tensor, axes: Any, keep: int) -> Tensor:
    """Logarithm of the sum."""
    return autograd.log(autograd.reduce_sum(x, axes, keep))


def reduce_log_sum_exp(x: Tensor, axes: Any, keep: int) -> Tensor:
    """``log(sum(exp(x - m))) + m`` with ``m`` the maximum (a constant, for stability)."""
    if x.dtype.kind != "f":
        return autograd.cast(reduce_log_sum_exp(autograd.cast(x, np.float64), axes, keep), x.dtype)
    xp = x.device.xp
    ax = None if axes is None else tuple(axes)
    m = x.data.max(axis=ax, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0).astype(x.dtype)
    s = autograd.reduce_sum(autograd.exp(autograd.sub(x, Tensor.wrap(m, x.device))), axes, keep)
    m_out = m if keep else m.reshape(s.shape)
    return autograd.add(autograd.log(s), Tensor.wrap(m_out, x.device))


@builds(reduction.ReduceMax)
def handle_global_max_pool(ctx: NodeContext, xs: list) -> Tensor:
    """GlobalMaxPool: max over every spatial axis, kept as size 1."""
    x = xs[0]
    return autograd.reduce_max(x, list(range(2, x.ndim())), 1)


@builds(reduction.CumSum)
def handle_cumsum(ctx: NodeContext, xs: list) -> Tensor:
    """CumSum(x, axis) with ``exclusive`` and ``reverse``."""
    axis = int(ctx.static(xs[1]).reshape(()))
    return reduction.cumsum(xs[0], axis, bool(ctx.attr("exclusive", 0)), bool(ctx.attr("reverse", 0)))


# ----- tables --------------------------------------------------------------------------------
EXPORT = {
    reduction.ReduceSum: _reduce_converter("ReduceSum", 13),
    reduction.ReduceMean: _reduce_converter("ReduceMean", 18),
    reduction.ReduceMax: _reduce_converter("ReduceMax", 18),
    reduction.CumSum: convert_cumsum,
}

IMPORT = {
    "ReduceSum": _reduce_handler(reduction.reduce_sum, 13, reduction.ReduceSum),
    "ReduceMean": _reduce_handler(reduction.reduce_mean, 18, reduction.ReduceMean),
    "ReduceMax": _reduce_handler(reduction.reduce_max, 18, reduction.ReduceMax),
    "GlobalMaxPool": handle_global_max_pool,
    "CumSum": handle_cumsum,
    "ReduceMin": _reduce_handler(reduce_min, 18, reduction.ReduceMax, elementwise.Neg),
    "ReduceL1": _reduce_handler(reduce_l1, 18, reduction.ReduceSum, elementwise.Abs),
    "ReduceL2": _reduce_handler(
        reduce_l2, 18, reduction.ReduceSum, elementwise.Mul, elementwise.Sqrt, elementwise.Cast
    ),
    "ReduceSumSquare": _reduce_handler(reduce_sum_square, 18, reduction.ReduceSum, elementwise.Mul),
    "ReduceLogSum": _reduce_handler(reduce_log_sum, 18, reduction.ReduceSum, elementwise.Log),
    "ReduceLogSumExp": _reduce_handler(
        reduce_log_sum_exp,
        18,
        reduction.ReduceSum,
        elementwise.Exp,
        elementwise.Sub,
        elementwise.Log,
        elementwise.Add,
        elementwise.Cast,
    ),
}
