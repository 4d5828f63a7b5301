"""DepthToSpace and SpaceToDepth (:mod:`singa.autograd.rearrange`): ONNX export and
import. ONNX SpaceToDepth has DCR order; the CRD form is written as its
Reshape-Transpose-Reshape."""

from __future__ import annotations

from typing import Any

from singa.autograd import rearrange as ra
from singa.sonnx.context import ExportContext, NodeContext, builds
from singa.tensor import Tensor


def convert_depth_to_space(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """DepthToSpace(blocksize, mode)."""
    ctx.node("DepthToSpace", ins, outs, blocksize=op.blocksize, mode=op.mode)


def convert_space_to_depth(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """SpaceToDepth(blocksize) for DCR; CRD as Reshape, Transpose, Reshape."""
    if op.mode == "DCR":
        ctx.node("SpaceToDepth", ins, outs, blocksize=op.blocksize)
        return
    split, perm, out = op.plan(xs[0].shape)
    t = ctx.node("Reshape", [ins[0], ctx.ints(_batch_free(ctx, ins[0], split))], 1)[0]
    t = ctx.node("Transpose", [t], 1, perm=list(perm))[0]
    ctx.node("Reshape", [t, ctx.ints(_batch_free(ctx, ins[0], out))], outs)


def _batch_free(ctx: ExportContext, name: str, shape: tuple) -> list:
    """``shape`` with its leading (batch) entry 0, which Reshape copies from the input."""
    varying = ctx.varying(name)
    return [0, *shape[1:]] if varying and varying[0] else list(shape)


@builds(ra.DepthToSpace)
def handle_depth_to_space(ctx: NodeContext, xs: list) -> Tensor:
    """DepthToSpace(blocksize, mode="DCR")."""
    return ra.depth_to_space(xs[0], int(ctx.attr("blocksize")), ctx.attr("mode", "DCR"))


@builds(ra.SpaceToDepth)
def handle_space_to_depth(ctx: NodeContext, xs: list) -> Tensor:
    """SpaceToDepth(blocksize, mode="DCR") (``mode`` from opset 28)."""
    return ra.space_to_depth(xs[0], int(ctx.attr("blocksize")), ctx.attr("mode", "DCR"))


def convert_col2im(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Col2Im(input, image_shape, block_shape) with strides, pads, dilations (opset 18)."""
    if ctx.opset < 18:
        raise ctx.error(op, f"Col2Im needs opset 18 or later (exporting opset {ctx.opset})")
    image, block = ctx.ints(op.image, "image_shape"), ctx.ints(op.block, "block_shape")
    attrs = {"strides": list(op.strides), "pads": list(op.pads), "dilations": list(op.dilations)}
    ctx.node("Col2Im", [ins[0], image, block], outs, **attrs)


@builds(ra.Col2Im)
def handle_col2im(ctx: NodeContext, xs: list) -> Tensor:
    """Col2Im(input, image_shape, block_shape) with strides, pads and dilations."""
    image = [int(v) for v in ctx.static(xs[1]).reshape(-1)]
    block = [int(v) for v in ctx.static(xs[2]).reshape(-1)]
    return ra.col2im(xs[0], image, block, ctx.attr("strides"), ctx.attr("pads"), ctx.attr("dilations"))


EXPORT = {
    ra.DepthToSpace: convert_depth_to_space,
    ra.SpaceToDepth: convert_space_to_depth,
    ra.Col2Im: convert_col2im,
}
IMPORT = {
    "DepthToSpace": handle_depth_to_space,
    "SpaceToDepth": handle_space_to_depth,
    "Col2Im": handle_col2im,
}
