"""Comparisons and logic (:mod:`singa.autograd.logical`): ONNX export and import.

Export: Greater/Less/Equal get both inputs in their common dtype; And/Or/Xor/Not, whose
ONNX inputs are booleans, get non-boolean inputs cast to bool (nonzero is true, as in
the autograd operators)."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.autograd import logical as lg
from singa.sonnx.context import ExportContext, NodeContext, builds, cast_to
from singa.tensor import Tensor

_COMPARE = {
    "Greater": (lg.Greater, lg.greater),
    "Less": (lg.Less, lg.less),
    "Equal": (lg.Equal, lg.equal),
    "GreaterOrEqual": (lg.GreaterEqual, lg.greater_equal),
    "LessOrEqual": (lg.LessEqual, lg.less_equal),
}
_LOGIC = {"And": (lg.And, lg._and), "Or": (lg.Or, lg._or), "Xor": (lg.Xor, lg._xor)}


def _compare_converter(op_type: str):
    def convert(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
        dt = np.result_type(xs[0].dtype, xs[1].dtype)
        ins = [cast_to(ctx, n, x.dtype, dt) for n, x in zip(ins, xs)]
        if op_type.endswith("OrEqual") and ctx.opset < 12:  # LessOrEqual/GreaterOrEqual: opset 12
            strict = ctx.node(op_type[: -len("OrEqual")], ins[::-1], 1)
            ctx.node("Not", strict, outs)
            return
        ctx.node(op_type, ins, outs)

    convert.__name__ = f"convert_{op_type.lower()}"
    return convert


def _logic_converter(op_type: str):
    def convert(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
        ctx.node(op_type, [cast_to(ctx, n, x.dtype, np.bool_) for n, x in zip(ins, xs)], outs)

    convert.__name__ = f"convert_{op_type.lower()}"
    return convert


def _binary_handler(fn, op: type):
    @builds(op)
    def handle(ctx: NodeContext, xs: list) -> Tensor:
        return fn(xs[0], xs[1])

    handle.__doc__ = f"{op.__name__} of the node's two inputs (boolean result)."
    return handle


@builds(lg.Not)
def handle_not(ctx: NodeContext, xs: list) -> Tensor:
    """Not."""
    return lg._not(xs[0])


EXPORT = {
    **{cls: _compare_converter(name) for name, (cls, _) in _COMPARE.items()},
    **{cls: _logic_converter(name) for name, (cls, _) in _LOGIC.items()},
    lg.Not: _logic_converter("Not"),
}
IMPORT = {
    **{name: _binary_handler(fn, cls) for name, (cls, fn) in {**_COMPARE, **_LOGIC}.items()},
    "Not": handle_not,
}
