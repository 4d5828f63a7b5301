"""One-hot encoding, nonzero positions and scattering (:mod:`singa.autograd.indexing`):
ONNX export and import (OneHot, NonZero, ScatterElements and its opset-9 name Scatter)."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.autograd import indexing as ix
from singa.sonnx.context import ExportContext, NodeContext, builds
from singa.tensor import Tensor

# ----- export --------------------------------------------------------------------------------


def convert_onehot(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """OneHot(indices, depth, values) with ``axis``."""
    depth = ctx.const(np.asarray([op.depth], dtype=np.int64), hint="depth")
    values = ctx.const(np.asarray(op.values), hint="onehot_values")
    ctx.node("OneHot", [ins[0], depth, values], outs, axis=int(op.axis))


def convert_nonzero(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """NonZero."""
    ctx.node("NonZero", ins, outs)


def convert_scatter_elements(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """ScatterElements(axis), with ``reduction`` from opset 16."""
    if op.reduction != "none" and ctx.opset < 16:
        raise ctx.error(
            op, f"reduction {op.reduction!r} needs opset 16 or later (exporting opset {ctx.opset})"
        )
    reduction = op.reduction if op.reduction != "none" else None
    ctx.node("ScatterElements", ins, outs, axis=int(op.axis), reduction=reduction)


# ----- import --------------------------------------------------------------------------------


@builds(ix.OneHot)
def handle_onehot(ctx: NodeContext, xs: list) -> Tensor:
    """OneHot(indices, depth, values): the output has the type of ``values``."""
    indices, depth, values = xs
    return ix.onehot(int(ctx.attr("axis", -1)), indices, ctx.static(depth), ctx.static(values))


@builds(ix.NonZero)
def handle_nonzero(ctx: NodeContext, xs: list) -> Tensor:
    """NonZero."""
    return ix.nonzero(xs[0])


@builds(ix.ScatterElements)
def handle_scatter_elements(ctx: NodeContext, xs: list) -> Tensor:
    """ScatterElements (and Scatter, its name before opset 11), every reduction."""
    reduction = ctx.attr("reduction", "none")
    data, indices, updates = xs
    return ix.scatter_elements(data, indices, updates, int(ctx.attr("axis", 0)), reduction)


EXPORT = {
    ix.OneHot: convert_onehot,
    ix.NonZero: convert_nonzero,
    ix.ScatterElements: convert_scatter_elements,
}
IMPORT = {
    "OneHot": handle_onehot,
    "NonZero": handle_nonzero,
    "ScatterElements": handle_scatter_elements,
    "Scatter": handle_scatter_elements,
}
