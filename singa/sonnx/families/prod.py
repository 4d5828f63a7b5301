"""Products of entries (:mod:`singa.autograd.prod`): ONNX ReduceProd (axes an input
from opset 18) and CumProd (opset 26)."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.autograd import prod
from singa.sonnx.context import ExportContext, NodeContext, builds, keep_dtype
from singa.tensor import Tensor


def convert_reduce_prod(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """ReduceProd with ``keepdims``, axes an input from opset 18."""
    extra, attrs = ctx.axes_arg("ReduceProd", op.axes, since=18)
    ctx.node("ReduceProd", ins + extra, outs, keepdims=int(op.keepdims), **attrs)


def convert_cumprod(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """CumProd(x, axis) (opset 26 and newer)."""
    if ctx.opset < 26:
        raise ctx.error(op, f"CumProd needs opset 26 or later (exporting opset {ctx.opset})")
    axis = ctx.const(np.asarray(op.axis, np.int64), hint="axis")
    ctx.node("CumProd", [ins[0], axis], outs, exclusive=int(op.exclusive), reverse=int(op.reverse))


@builds(prod.ReduceProd)
def handle_reduce_prod(ctx: NodeContext, xs: list) -> Tensor:
    """ReduceProd(data, axes) with ``keepdims`` and ``noop_with_empty_axes``."""
    x = xs[0]
    if ctx.opset >= 18:
        axes = ctx.static(xs[1]) if len(xs) > 1 and xs[1] is not None else None
        axes = None if axes is None else [int(a) for a in axes.reshape(-1)]
    else:
        axes = ctx.attr("axes")
    if not axes and int(ctx.attr("noop_with_empty_axes", 0)):
        return x
    return keep_dtype(prod.reduce_prod(x, axes or None, int(ctx.attr("keepdims", 1))), x.dtype)


@builds(prod.CumProd)
def handle_cumprod(ctx: NodeContext, xs: list) -> Tensor:
    """CumProd(x, axis) with ``exclusive`` and ``reverse``."""
    axis = int(ctx.static(xs[1]).reshape(()))
    return prod.cumprod(xs[0], axis, bool(ctx.attr("exclusive", 0)), bool(ctx.attr("reverse", 0)))


EXPORT = {prod.ReduceProd: convert_reduce_prod, prod.CumProd: convert_cumprod}
IMPORT = {"ReduceProd": handle_reduce_prod, "CumProd": handle_cumprod}
