"""Positions (:mod:`singa.autograd.positional`): ONNX export. ``slice_like`` is a Slice
whose end is read from the other input's shape, so the length stays dynamic; the
importer runs such a Slice through the ``shaping`` family."""

from __future__ import annotations

from typing import Any

from singa.autograd import positional as pos
from singa.sonnx.context import ExportContext


def convert_slice_like(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Slice(x, [0], Shape(like)[like_axis], [axis])."""
    shape = ctx.node("Shape", [ins[1]], 1)[0]
    end = ctx.node("Slice", [shape, ctx.ints([op.like_axis]), ctx.ints([op.like_axis + 1])], 1)[0]
    ctx.node("Slice", [ins[0], ctx.ints([0]), end, ctx.ints([op.axis])], outs)


EXPORT = {pos.SliceLike: convert_slice_like}
IMPORT: dict = {}
