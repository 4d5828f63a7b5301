"""ONNX converters for :mod:`singa.autograd.elementwise`."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.autograd import elementwise as ew
from singa.sonnx import ops
from singa.sonnx.export import ExportContext, onnx_dtype


def cast_to(ctx: ExportContext, name: str, have: Any, want: Any) -> str:
    """``name`` cast to dtype ``want`` when its dtype ``have`` differs."""
    if np.dtype(have) == np.dtype(want):
        return name
    return ctx.node("Cast", [name], 1, to=onnx_dtype(want))[0]


def _binary(op_type: str):
    def convert(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
        dt = ys[0].dtype
        a = cast_to(ctx, ins[0], xs[0].dtype, dt)
        b = cast_to(ctx, ins[1], xs[1].dtype, dt)
        ctx.node(op_type, [a, b], outs)

    convert.__name__ = f"convert_{op_type.lower()}"
    return convert


def _unary(op_type: str):
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
    """Cast(to) (the importer's cast operator)."""
    ctx.node("Cast", ins, outs, to=onnx_dtype(op.dtype))


CONVERTERS = {
    ew.Add: _binary("Add"),
    ew.Sub: _binary("Sub"),
    ew.Mul: _binary("Mul"),
    ew.Div: _binary("Div"),
    ew.Pow: _binary("Pow"),
    ew.Maximum: _binary("Max"),
    ew.Minimum: _binary("Min"),
    ew.Neg: _unary("Neg"),
    ew.Exp: _unary("Exp"),
    ew.Log: _unary("Log"),
    ew.Sqrt: _unary("Sqrt"),
    ew.Abs: _unary("Abs"),
    ew.Sign: _unary("Sign"),
    ew.Clip: convert_clip,
    ops.Cast: convert_cast,
    ops.Erf: _unary("Erf"),
}
