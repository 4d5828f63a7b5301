"""Indexing by index tensors (:mod:`singa.autograd.indexing_nd`): ONNX export and
import of GatherElements, GatherND and ScatterND (``reduction`` from opset 16, "max"
and "min" from 18)."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa import autograd
from singa.autograd import indexing as ix
from singa.autograd import indexing_nd as ind
from singa.autograd.shaping import Pad, Reshape, Slice
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


@builds(ix.Gather, Reshape)
def handle_compress(ctx: NodeContext, xs: list) -> Tensor:
    """Compress(input, condition): the slices along ``axis`` (the flattened input
    without it) where the condition (possibly shorter) is true."""
    x = xs[0]
    axis = ctx.attr("axis")
    if axis is None:
        x, axis = autograd.reshape(x, (-1,)), 0
    axis = int(axis) % x.ndim()
    keep = np.flatnonzero(ctx.static(xs[1]).reshape(-1)[: x.shape[axis]])
    return autograd.gather(x, axis, ctx.const(keep.astype(np.int64)))


@builds(ind.GatherElements)
def handle_reverse_sequence(ctx: NodeContext, xs: list) -> Tensor:
    """ReverseSequence(input, sequence_lens): along ``time_axis``, the first
    ``sequence_lens[b]`` entries of each batch entry b (on ``batch_axis``) reversed."""
    x = xs[0]
    lens = ctx.static(xs[1]).reshape(-1).astype(np.int64)
    t_ax, b_ax = int(ctx.attr("time_axis", 0)), int(ctx.attr("batch_axis", 1))
    t = np.arange(x.shape[t_ax])
    shape = [1] * x.ndim()
    shape[t_ax], shape[b_ax] = x.shape[t_ax], x.shape[b_ax]
    tt = t[:, None] if t_ax < b_ax else t[None, :]
    ll = lens[None, :] if t_ax < b_ax else lens[:, None]
    idx = np.where(tt < ll, ll - 1 - tt, tt).reshape(shape)
    return ind.gather_elements(x, ctx.const(np.broadcast_to(idx, x.shape).copy()), t_ax)


@builds(Slice, Pad)
def handle_center_crop_pad(ctx: NodeContext, xs: list) -> Tensor:
    """CenterCropPad(input, shape): each axis of ``axes`` (all by default) centre-cropped
    or zero-padded to the given length; an odd difference leaves the extra element
    at the end (crops start at floor(diff / 2), pads put the larger half after)."""
    x = xs[0]
    r = x.ndim()
    axes = [int(a) % r for a in ctx.attr("axes", list(range(r)))]
    want = [int(v) for v in ctx.static(xs[1]).reshape(-1)]
    for a, n in zip(axes, want):
        have = x.shape[a]
        if n < have:
            start = (have - n) // 2
            x = autograd.slice(x, [start], [start + n], [a])
        elif n > have:
            pads = [0] * (2 * r)
            pads[a] = (n - have) // 2
            pads[a + r] = n - have - pads[a]
            x = autograd.pad(x, "constant", pads)
    return x


@builds(ix.ScatterElements, Reshape, Pad)
def handle_max_unpool(ctx: NodeContext, xs: list) -> Tensor:
    """MaxUnpool(X, I, output_shape): zeros of the unpooled shape (from kernel_shape,
    strides and pads) with X's values at the flat indices I (MaxPool's Indices
    output), padded with zeros at the end to ``output_shape`` when given."""
    x, idx = xs[0], xs[1]
    nd = x.ndim() - 2
    k, s = list(ctx.attr("kernel_shape")), list(ctx.attr("strides", [1] * nd))
    pads = list(ctx.attr("pads", [0] * (2 * nd)))
    shape = list(x.shape[:2]) + [
        (x.shape[2 + i] - 1) * s[i] + k[i] - pads[i] - pads[i + nd] for i in range(nd)
    ]
    zeros = ctx.const(np.zeros(int(np.prod(shape)), dtype=x.dtype))
    flat = ix.scatter_elements(zeros, autograd.reshape(idx, (-1,)), autograd.reshape(x, (-1,)), 0)
    y = autograd.reshape(flat, tuple(shape))
    if len(xs) > 2 and xs[2] is not None:  # a larger output_shape: zeros after the end (ONNX's reference)
        want = [int(v) for v in ctx.static(xs[2]).reshape(-1)]
        extra = [w - n for w, n in zip(want, shape)]
        if any(e < 0 for e in extra):
            raise ctx.unsupported(f"output_shape {want} smaller than the unpooled shape {shape}")
        if any(extra):
            y = autograd.pad(y, "constant", [0] * len(shape) + extra)
    return y


EXPORT = {
    ind.GatherElements: convert_gather_elements,
    ind.GatherND: convert_gather_nd,
    ind.ScatterND: convert_scatter_nd,
}
IMPORT = {
    "GatherElements": handle_gather_elements,
    "GatherND": handle_gather_nd,
    "ScatterND": handle_scatter_nd,
    "Compress": handle_compress,
    "ReverseSequence": handle_reverse_sequence,
    "CenterCropPad": handle_center_crop_pad,
    "MaxUnpool": handle_max_unpool,
}
