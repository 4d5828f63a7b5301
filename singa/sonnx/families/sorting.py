"""Sorting (:mod:`singa.autograd.sorting`): ONNX TopK export and import, and Unique
(computed when the node runs: its outputs have data-dependent sizes and no gradient)."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.autograd import sorting as st
from singa.sonnx.context import ExportContext, NodeContext, builds


def convert_topk(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """TopK(X, K) with ``axis``, ``largest`` (opset 11) and ``sorted``; before opset 10 k
    was an attribute (not written: opsets 11 and newer only)."""
    k = ctx.ints([op.k], "k")
    ctx.node("TopK", [ins[0], k], outs, axis=int(op.axis), largest=int(op.largest), sorted=1)


@builds(st.TopK)
def handle_topk(ctx: NodeContext, xs: list) -> tuple:
    """TopK(X, K): values and int64 indices (``sorted=0`` still returns them sorted,
    which ONNX allows)."""
    k = int(ctx.static(xs[1]).reshape(-1)[0])
    return st.topk(xs[0], k, int(ctx.attr("axis", -1)), bool(ctx.attr("largest", 1)))


@builds()
def handle_unique(ctx: NodeContext, xs: list) -> tuple:
    """Unique(X): the distinct values (sorted, or in order of first appearance with
    ``sorted=0``), the index of each first occurrence, the inverse indices and the
    counts, along ``axis`` (flattened when absent)."""
    a = ctx.static(xs[0])
    axis = ctx.attr("axis")
    if axis is not None:
        axis = int(axis) % a.ndim
    vals, first, inverse, counts = np.unique(
        a, return_index=True, return_inverse=True, return_counts=True, axis=axis
    )
    inverse = inverse.reshape(-1)
    if not int(ctx.attr("sorted", 1)):
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        vals = np.take(vals, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    return tuple(
        ctx.const(v)
        for v in (vals, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64))
    )


EXPORT = {st.TopK: convert_topk}
IMPORT = {"TopK": handle_topk, "Unique": handle_unique}
