"""Indexing by index tensors (:mod:`singa.autograd.indexing_nd`): ONNX export and
import of GatherElements, GatherND and ScatterND (``reduction`` from opset 16, "max"
and "min" from 18)."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.autograd import indexing_nd as ind
from singa.sonnx.context import ExportContext, NodeContext, builds, cast_to
from singa.tensor import Tensor


def convert_gather_elements(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """GatherElements(axis) with int64 indices."""
    ctx.node("GatherElements", [ins[0], cast_to(ctx, ins[1], xs[1].dtype, np.int64)], outs, axis=int(op.axis))


def convert_gather_nd(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """GatherND(batch_dims) with int64 indices (batch_dims from opset 12)."""
    if op.batch_dims and ctx.opset < 12:
        raise ctx.error(op, f"batch_dims needs opset 12 or later (exporting opset {ctx.opset})")
    bd = int(op.batch_dims) if ctx.opset >= 12 else None
    ctx.node("GatherND", [ins[0], cast_to(ctx, ins[1], xs[1].dtype, np.int64)], outs, batch_dims=bd)


def convert_scatter_nd(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """ScatterND, with ``reduction`` add/mul from opset 16 and max/min from 18."""
    need = {"none": 11, "add": 16, "mul": 16, "max": 18, "min": 18}[op.reduction]
    if ctx.opset < need:
        raise ctx.error(
            op, f"reduction {op.reduction!r} needs opset {need} or later (exporting opset {ctx.opset})"
        )
    reduction = op.reduction if op.reduction != "none" else None
    idx = cast_to(ctx, ins[1], xs[1].dtype, np.int64)
    ctx.node("ScatterND", [ins[0], idx, ins[2]], outs, reduction=reduction)


@builds(ind.GatherElements)
def handle_gather_elements(ctx: NodeContext, xs: list) -> Tensor:
    """GatherElements(axis)."""
    return ind.gather_elements(xs[0], xs[1], int(ctx.attr("axis", 0)))


@builds(ind.GatherND)
def handle_gather_nd(ctx: NodeContext, xs: list) -> Tensor:
    """GatherND(batch_dims)."""
    return ind.gather_nd(xs[0], xs[1], int(ctx.attr("batch_dims", 0)))


@builds(ind.ScatterND)
def handle_scatter_nd(ctx: NodeContext, xs: list) -> Tensor:
    """ScatterND(reduction)."""
    return ind.scatter_nd(xs[0], xs[1], xs[2], ctx.attr("reduction", "none"))


EXPORT = {
    ind.GatherElements: convert_gather_elements,
    ind.GatherND: convert_gather_nd,
    ind.ScatterND: convert_scatter_nd,
}
IMPORT = {
    "GatherElements": handle_gather_elements,
    "GatherND": handle_gather_nd,
    "ScatterND": handle_scatter_nd,
}
