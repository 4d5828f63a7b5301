"""ONNX import handlers: elementwise arithmetic, activations, reductions and casts."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import helper

from singa import autograd
from singa.sonnx.backend import NodeContext
from singa.sonnx.ops import cast, erf
from singa.tensor import Tensor


def keep_dtype(y: Tensor, dtype: Any) -> Tensor:
    """``y`` cast back to ``dtype`` when an operator promoted it."""
    return cast(y, dtype) if y.dtype != np.dtype(dtype) else y


# ----- binary and variadic arithmetic ---------------------------------------------------------
def _binary(fn):
    def handle(ctx: NodeContext, xs: list) -> Tensor:
        a, b = xs
        return keep_dtype(fn(a, b), a.dtype)

    return handle


def handle_div(ctx: NodeContext, xs: list) -> Tensor:
    """Div; integer inputs divide with truncation, as ONNX runtimes do."""
    a, b = xs
    if a.dtype.kind in "iub" and b.dtype.kind in "iub":
        xp = ctx.device.xp
        with np.errstate(divide="ignore", invalid="ignore"):
            return ctx.wrap(xp.trunc(a.data / b.data).astype(a.dtype))
    return keep_dtype(autograd.div(a, b), a.dtype)


def handle_pow(ctx: NodeContext, xs: list) -> Tensor:
    """Pow; the result has the base's type."""
    a, b = xs
    if a.dtype.kind in "iu":
        return ctx.wrap((a.data.astype(np.float64) ** b.data).astype(a.dtype))
    return keep_dtype(autograd.pow(a, b), a.dtype)


def _variadic(fn):
    def handle(ctx: NodeContext, xs: list) -> Tensor:
        xs = [x for x in xs if x is not None]
        y = xs[0]
        if len(xs) == 1:
            return autograd.mul(y, ctx.const(1, y.dtype)) if y.dtype.kind == "f" else y
        for x in xs[1:]:
            y = fn(y, x)
        return keep_dtype(y, xs[0].dtype)

    return handle


def handle_mean(ctx: NodeContext, xs: list) -> Tensor:
    """Mean of the inputs (broadcast)."""
    s = _variadic(autograd.add)(ctx, xs)
    return autograd.div(s, ctx.const(len([x for x in xs if x is not None]), s.dtype))


# ----- unary ------------------------------------------------------------------------------------
def _unary(fn):
    def handle(ctx: NodeContext, xs: list) -> Tensor:
        return keep_dtype(fn(xs[0]), xs[0].dtype)

    return handle


def handle_reciprocal(ctx: NodeContext, xs: list) -> Tensor:
    """1 / x."""
    return autograd.div(ctx.const(1, xs[0].dtype), xs[0])


def handle_clip(ctx: NodeContext, xs: list) -> Tensor:
    """Clip with optional min/max inputs (opset 11+)."""
    x = xs[0]
    lo = ctx.static(xs[1]) if len(xs) > 1 else None
    hi = ctx.static(xs[2]) if len(xs) > 2 else None
    lo = None if lo is None else lo.reshape(()).astype(x.dtype).item()
    hi = None if hi is None else hi.reshape(()).astype(x.dtype).item()
    if lo is not None and hi is not None and lo > hi:  # ONNX: every value becomes max
        return autograd.mul(x, ctx.const(0, x.dtype)) + ctx.const(hi, x.dtype)
    return keep_dtype(autograd.clip(x, lo, hi), x.dtype)


# ----- activations -------------------------------------------------------------------------------
def handle_leakyrelu(ctx: NodeContext, xs: list) -> Tensor:
    """LeakyRelu(alpha=0.01)."""
    return autograd.leakyrelu(xs[0], float(ctx.attr("alpha", 0.01)))


def handle_elu(ctx: NodeContext, xs: list) -> Tensor:
    """Elu(alpha=1)."""
    return autograd.elu(xs[0], float(ctx.attr("alpha", 1.0)))


def handle_selu(ctx: NodeContext, xs: list) -> Tensor:
    """Selu(alpha, gamma) with ONNX's defaults."""
    return autograd.selu(
        xs[0],
        float(ctx.attr("alpha", 1.67326319217681884765625)),
        float(ctx.attr("gamma", 1.05070102214813232421875)),
    )


def handle_hardsigmoid(ctx: NodeContext, xs: list) -> Tensor:
    """HardSigmoid(alpha=0.2, beta=0.5)."""
    return autograd.hardsigmoid(xs[0], float(ctx.attr("alpha", 0.2)), float(ctx.attr("beta", 0.5)))


def handle_gelu(ctx: NodeContext, xs: list) -> Tensor:
    """Gelu(approximate="none" | "tanh")."""
    return autograd.gelu(xs[0], ctx.attr("approximate", "none"))


def handle_prelu(ctx: NodeContext, xs: list) -> Tensor:
    """PRelu: x where x > 0, slope * x elsewhere (slope broadcast to x)."""
    x, slope = xs
    return autograd.add(autograd.relu(x), autograd.mul(slope, autograd.minimum(x, ctx.const(0, x.dtype))))


def _softmax_like(fn):
    """Softmax/LogSoftmax: along ``axis`` (opset 13+, default -1), or on the 2-D
    coercion of the input at ``axis`` (before 13, default 1)."""

    def handle(ctx: NodeContext, xs: list) -> Tensor:
        x = xs[0]
        r = x.ndim()
        if ctx.opset >= 13:
            return fn(x, axis=int(ctx.attr("axis", -1)) % max(r, 1))
        axis = int(ctx.attr("axis", 1)) % max(r, 1)
        if axis == r - 1:
            return fn(x, axis=axis)
        shape = x.shape
        x2 = autograd.reshape(x, (int(np.prod(shape[:axis])), -1))
        return autograd.reshape(fn(x2, axis=1), shape)

    return handle


# ----- reductions ---------------------------------------------------------------------------------
def _reduce(fn, axes_input_since: int):
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
    """Reductions of empty tensors: sums are 0, maxima the lowest value (ONNX)."""
    xp = ctx.device.xp
    ax = None if axes is None else tuple(int(a) % x.ndim() for a in axes)
    if fn is autograd.reduce_max:
        low = False if x.dtype == bool else (-np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min)
        y = xp.max(x.data, axis=ax, keepdims=bool(keep), initial=low)
    elif fn is autograd.reduce_mean:
        with np.errstate(invalid="ignore", divide="ignore"):
            y = xp.mean(x.data, axis=ax, keepdims=bool(keep))
    else:
        y = xp.sum(x.data, axis=ax, keepdims=bool(keep))
    return ctx.wrap(xp.asarray(y).astype(x.dtype))


# ----- casts ---------------------------------------------------------------------------------------
def np_dtype(ctx: NodeContext, onnx_type: int) -> np.dtype:
    """The numpy dtype of an ONNX element type; unsupported for types numpy lacks."""
    try:
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(onnx_type))
    except Exception as e:
        raise ctx.unsupported(f"element type {onnx_type} is not supported") from e
    if dt.kind not in "biuf" or dt.name not in _NUMPY_TYPES:
        raise ctx.unsupported(f"element type {helper.tensor_dtype_to_string(onnx_type)} is not supported")
    return dt


_NUMPY_TYPES = {
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
}


def handle_cast(ctx: NodeContext, xs: list) -> Tensor:
    """Cast(to) between numpy's numeric types and bool."""
    x = xs[0]
    if x.dtype.name not in _NUMPY_TYPES:
        raise ctx.unsupported(f"casting from {x.dtype} is not supported")
    return cast(x, np_dtype(ctx, int(ctx.attr("to"))))


IMPORTERS = {
    "Add": _binary(autograd.add),
    "Sub": _binary(autograd.sub),
    "Mul": _binary(autograd.mul),
    "Div": handle_div,
    "Pow": handle_pow,
    "Max": _variadic(autograd.maximum),
    "Min": _variadic(autograd.minimum),
    "Sum": _variadic(autograd.add),
    "Mean": handle_mean,
    "Neg": _unary(autograd.neg),
    "Exp": _unary(autograd.exp),
    "Log": _unary(autograd.log),
    "Sqrt": _unary(autograd.sqrt),
    "Abs": _unary(autograd.abs),
    "Sign": _unary(autograd.sign),
    "Erf": _unary(erf),
    "Reciprocal": handle_reciprocal,
    "Clip": handle_clip,
    "Relu": _unary(autograd.relu),
    "LeakyRelu": handle_leakyrelu,
    "Elu": handle_elu,
    "Selu": handle_selu,
    "Sigmoid": _unary(autograd.sigmoid),
    "Tanh": _unary(autograd.tanh),
    "Softplus": _unary(autograd.softplus),
    "Softsign": _unary(autograd.softsign),
    "Gelu": handle_gelu,
    "HardSigmoid": handle_hardsigmoid,
    "PRelu": handle_prelu,
    "Softmax": _softmax_like(autograd.softmax),
    "LogSoftmax": _softmax_like(autograd.log_softmax),
    "ReduceSum": _reduce(autograd.reduce_sum, 13),
    "ReduceMean": _reduce(autograd.reduce_mean, 18),
    "ReduceMax": _reduce(autograd.reduce_max, 18),
    "Cast": handle_cast,
}
