"""Rounding (:mod:`singa.autograd.rounding`): ONNX export and import.

Ceil and Floor are the ONNX ops of the same name; ``rounde`` (halves to even) is ONNX
Round. ``round`` (halves away from zero) has no ONNX op and is written exactly as
sign(x) * (floor(|x|) + (|x| - floor(|x|) >= 0.5)); ONNX Round imports as ``rounde``."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.autograd import rounding as rd
from singa.sonnx.context import ExportContext, onnx_dtype, unary_handler


def _converter(op_type: str):
    def convert(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
        ctx.node(op_type, ins, outs)

    convert.__name__ = f"convert_{op_type.lower()}"
    return convert


def convert_round_half_away(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """sign(x) * (floor(|x|) + cast(not(frac < 0.5))), frac = |x| - floor(|x|) (exact)."""
    dt = xs[0].dtype
    x = ins[0]
    a = ctx.node("Abs", [x], 1)[0]
    f = ctx.node("Floor", [a], 1)[0]
    frac = ctx.node("Sub", [a, f], 1)[0]
    small = ctx.node("Less", [frac, ctx.const(np.asarray(0.5, dtype=dt), hint="half")], 1)[0]
    up = ctx.node("Cast", [ctx.node("Not", [small], 1)[0]], 1, to=onnx_dtype(dt))[0]
    mag = ctx.node("Add", [f, up], 1)[0]
    ctx.node("Mul", [ctx.node("Sign", [x], 1)[0], mag], outs)


EXPORT = {
    rd.Ceil: _converter("Ceil"),
    rd.Floor: _converter("Floor"),
    rd.Rounde: _converter("Round"),
    rd.Round: convert_round_half_away,
}
IMPORT = {
    "Ceil": unary_handler(rd.ceil, rd.Ceil),
    "Floor": unary_handler(rd.floor, rd.Floor),
    "Round": unary_handler(rd.rounde, rd.Rounde),
}
