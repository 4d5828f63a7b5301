"""Trigonometric and hyperbolic functions (:mod:`singa.autograd.trigonometric`): ONNX
export and import. Each operator is the ONNX op of the same name."""

from __future__ import annotations

from typing import Any

from singa.autograd import trigonometric as trig
from singa.sonnx.context import ExportContext, unary_handler

_OPS = {
    "Sin": (trig.Sin, trig.sin),
    "Cos": (trig.Cos, trig.cos),
    "Tan": (trig.Tan, trig.tan),
    "Asin": (trig.Asin, trig.asin),
    "Acos": (trig.Acos, trig.acos),
    "Atan": (trig.Atan, trig.atan),
    "Sinh": (trig.Sinh, trig.sinh),
    "Cosh": (trig.Cosh, trig.cosh),
    "Asinh": (trig.Asinh, trig.asinh),
    "Acosh": (trig.Acosh, trig.acosh),
    "Atanh": (trig.Atanh, trig.atanh),
}


def _converter(op_type: str):
    def convert(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
        ctx.node(op_type, ins, outs)

    convert.__name__ = f"convert_{op_type.lower()}"
    return convert


EXPORT = {cls: _converter(name) for name, (cls, _) in _OPS.items()}
IMPORT = {name: unary_handler(fn, cls) for name, (cls, fn) in _OPS.items()}
