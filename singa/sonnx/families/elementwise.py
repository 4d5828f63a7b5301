"""Elementwise arithmetic (:mod:`singa.autograd.elementwise`): ONNX export and import."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.autograd import elementwise as ew
from singa.sonnx.context import (
    NUMPY_TYPES,
    ExportContext,
    NodeContext,
    builds,
    cast_to,
    keep_dtype,
    np_dtype,
    onnx_dtype,
    unary_handler,
)
from singa.tensor import Tensor

# ----- export --------------------------------------------------------------------------------


def _binary_converter(op_type: str):
    def convert(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
        dt = ys[0].dtype
        a = cast_to(ctx, ins[0], xs[0].dtype, dt)
        b = cast_to(ctx, ins[1], xs[1].dtype, dt)
        ctx.node(op_type, [a, b], outs)

    convert.__name__ = f"convert_{op_type.lower()}"
    return convert


def _unary_converter(op_type: str):
    def convert(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
        ctx.node(op_type, [cast_to(ctx, ins[0], xs[0].dtype, ys[0].dtype)], outs)

    convert.__name__ = f"convert_{op_type.lower()}"
    return convert


def convert_clip(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Clip with its bounds as constant inputs (an empty name for a missing bound)."""
    dt = xs[0].dtype
    lo = "" if op.min is None else ctx.const(np.asarray(op.min, dtype=dt), hint="clip_min")
    hi = "" if op.max is None else ctx.const(np.asarray(op.max, dtype=dt), hint="clip_max")
    inputs = [ins[0], lo, hi]
    while inputs[-1] == "":
        inputs.pop()
    ctx.node("Clip", inputs, outs)


def convert_cast(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Cast(to)."""
    ctx.node("Cast", ins, outs, to=onnx_dtype(op.dtype))


# ----- import --------------------------------------------------------------------------------


def _binary_handler(fn, op: type):
    @builds(op)
    def handle(ctx: NodeContext, xs: list) -> Tensor:
        a, b = xs
        return keep_dtype(fn(a, b), a.dtype)

    return handle


@builds(ew.Div)
def handle_div(ctx: NodeContext, xs: list) -> Tensor:
    """Div; integer inputs divide with truncation, as ONNX runtimes do."""
    a, b = xs
    if a.dtype.kind in "iub" and b.dtype.kind in "iub":
        xp = ctx.device.xp
        with np.errstate(divide="ignore", invalid="ignore"):
            return ctx.wrap(xp.trunc(a.data / b.data).astype(a.dtype))
    return keep_dtype(ew.div(a, b), a.dtype)


@builds(ew.Pow)
def handle_pow(ctx: NodeContext, xs: list) -> Tensor:
    """Pow; the result has the base's type."""
    a, b = xs
    if a.dtype.kind in "iu":
        return ctx.wrap((a.data.astype(np.float64) ** b.data).astype(a.dtype))
    return keep_dtype(ew.pow(a, b), a.dtype)


@builds(ew.Clip, ew.Mul, ew.Add)
def handle_clip(ctx: NodeContext, xs: list) -> Tensor:
    """Clip with optional min/max inputs (opset 11+)."""
    x = xs[0]
    lo = ctx.static(xs[1]) if len(xs) > 1 else None
    hi = ctx.static(xs[2]) if len(xs) > 2 else None
    lo = None if lo is None else lo.reshape(()).astype(x.dtype).item()
    hi = None if hi is None else hi.reshape(()).astype(x.dtype).item()
    if lo is not None and hi is not None and lo > hi:  # ONNX: every value becomes max
        return ew.mul(x, ctx.const(0, x.dtype)) + ctx.const(hi, x.dtype)
    return keep_dtype(ew.clip(x, lo, hi), x.dtype)


@builds(ew.Cast)
def handle_cast(ctx: NodeContext, xs: list) -> Tensor:
    """Cast(to) between numpy's numeric types and bool."""
    x = xs[0]
    if x.dtype.name not in NUMPY_TYPES:
        raise ctx.unsupported(f"casting from {x.dtype} is not supported")
    return ew.cast(x, np_dtype(ctx, int(ctx.attr("to"))))


# ----- tables --------------------------------------------------------------------------------
EXPORT = {
    ew.Add: _binary_converter("Add"),
    ew.Sub: _binary_converter("Sub"),
    ew.Mul: _binary_converter("Mul"),
    ew.Div: _binary_converter("Div"),
    ew.Pow: _binary_converter("Pow"),
    ew.Maximum: _binary_converter("Max"),
    ew.Minimum: _binary_converter("Min"),
    ew.Neg: _unary_converter("Neg"),
    ew.Exp: _unary_converter("Exp"),
    ew.Log: _unary_converter("Log"),
    ew.Sqrt: _unary_converter("Sqrt"),
    ew.Abs: _unary_converter("Abs"),
    ew.Sign: _unary_converter("Sign"),
    ew.Clip: convert_clip,
    ew.Cast: convert_cast,
    ew.Erf: _unary_converter("Erf"),
    ew.Identity: _unary_converter("Identity"),
    ew.Reciprocal: _unary_converter("Reciprocal"),
}

IMPORT = {
    "Add": _binary_handler(ew.add, ew.Add),
    "Sub": _binary_handler(ew.sub, ew.Sub),
    "Mul": _binary_handler(ew.mul, ew.Mul),
    "Div": handle_div,
    "Pow": handle_pow,
    "Neg": unary_handler(ew.neg, ew.Neg),
    "Exp": unary_handler(ew.exp, ew.Exp),
    "Log": unary_handler(ew.log, ew.Log),
    "Sqrt": unary_handler(ew.sqrt, ew.Sqrt),
    "Abs": unary_handler(ew.abs, ew.Abs),
    "Sign": unary_handler(ew.sign, ew.Sign),
    "Erf": unary_handler(ew.erf, ew.Erf),
    "Reciprocal": unary_handler(ew.reciprocal, ew.Reciprocal),
    "Identity": unary_handler(ew.identity, ew.Identity),
    "Clip": handle_clip,
    "Cast": handle_cast,
}
