"""Indexing operators (:mod:`singa.autograd.indexing`): ONNX export and import.

``x[key]`` with a basic key becomes Slice + Squeeze (int indices) + Unsqueeze (None);
one integer array on one axis (the others whole) becomes Gather. OneHot, NonZero and
ScatterElements (also under its opset-9 name Scatter) map to the operators of the same
names.
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from singa import autograd
from singa.autograd import indexing as ix
from singa.sonnx.context import ExportContext, NodeContext, builds, cast_to
from singa.sonnx.families.shaping import I64_MAX, I64_MIN, slice_node
from singa.tensor import Tensor

_WHOLE = builtins.slice(None)

# ----- export --------------------------------------------------------------------------------


def convert_gather(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Gather(axis) with int64 indices."""
    idx = ins[1]
    if xs[1].dtype.kind not in "iu":
        idx = cast_to(ctx, idx, xs[1].dtype, np.int64)
    ctx.node("Gather", [ins[0], idx], outs, axis=int(op.axis))


def convert_embedding(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Gather(w, x) along axis 0 (float indices cast to int64)."""
    idx = ins[0]
    if xs[0].dtype.kind not in "iu":
        idx = cast_to(ctx, idx, xs[0].dtype, np.int64)
    ctx.node("Gather", [ins[1], idx], outs, axis=0)


def convert_where(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Where(condition, x, y) (the operator takes x, y, condition)."""
    dt = ys[0].dtype
    c = cast_to(ctx, ins[2], xs[2].dtype, np.bool_)
    ctx.node("Where", [c, cast_to(ctx, ins[0], xs[0].dtype, dt), cast_to(ctx, ins[1], xs[1].dtype, dt)], outs)


def convert_getitem(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Basic indexing as Slice + Squeeze + Unsqueeze; one integer array on one axis as
    Gather; anything else is refused."""
    if op.basic:
        entries, squeeze, new_axes = _basic_plan(_full_key(list(op.key), xs[0].ndim), xs[0].shape)
        _emit_basic(ctx, ins[0], outs, entries, squeeze, new_axes)
        return
    gather = _one_array_axis(list(op.key))
    if gather is None:
        raise ctx.error(
            op,
            f"indexing with key {op.key!r} has no ONNX equivalent here (only basic indexing "
            "and one integer array on one axis are exported)",
        )
    axis, indices = gather
    ctx.node("Gather", [ins[0], ctx.const(indices, hint="indices")], outs, axis=axis)


def _full_key(key: list, r: int) -> list:
    """A basic key with its Ellipsis expanded and whole slices appended, one entry per
    axis of a rank-``r`` input (plus the None entries)."""
    n_real = builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key[i : i + 1] = [_WHOLE] * (r - n_real)
    return key + [_WHOLE] * (r - builtins.sum(1 for k in key if k is not None))


def _slice_bounds(k: builtins.slice) -> tuple[int, int, int]:
    """(start, end, step) of a slice with its open ends as int64 extremes."""
    st = 1 if k.step is None else int(k.step)
    if st > 0:
        return (0 if k.start is None else int(k.start)), (I64_MAX if k.stop is None else int(k.stop)), st
    return (I64_MAX if k.start is None else int(k.start)), (I64_MIN if k.stop is None else int(k.stop)), st


def _basic_plan(key: list, shape: tuple) -> tuple[list, list, list]:
    """The Slice entries (axis, start, end, step), the input axes to squeeze (int
    indices) and the output axes to insert (None) of a full basic key."""
    entries, squeeze, new_axes = [], [], []
    axis = out_axis = 0
    for k in key:
        if k is None:
            new_axes.append(out_axis)
            out_axis += 1
            continue
        if isinstance(k, builtins.slice):
            s, e, st = _slice_bounds(k)
            if not (s == 0 and e >= shape[axis] and st == 1):
                entries.append((axis, s, e, st))
            out_axis += 1
        else:
            i = int(k)
            entries.append((axis, i, i + 1 if i != -1 else I64_MAX, 1))
            squeeze.append(axis)
        axis += 1
    return entries, squeeze, new_axes


def _emit_basic(ctx: ExportContext, x: str, outs: list, entries: list, squeeze: list, new_axes: list) -> None:
    """Slice, then Squeeze and Unsqueeze where needed, the last node writing ``outs``."""
    last = not squeeze and not new_axes
    y = slice_node(ctx, x, entries, outs[0] if last else None)
    if squeeze:
        extra, attrs = ctx.axes_arg("Squeeze", squeeze, since=13)
        y = ctx.node("Squeeze", [y] + extra, outs if not new_axes else 1, **attrs)[0]
    if new_axes:
        extra, attrs = ctx.axes_arg("Unsqueeze", new_axes, since=13)
        ctx.node("Unsqueeze", [y] + extra, outs, **attrs)


def _one_array_axis(key: list) -> tuple[int, np.ndarray] | None:
    """(axis, int64 indices) when the key is one integer array on one axis with every
    other entry a whole slice; else None."""
    arrays = [(i, k) for i, k in enumerate(key) if not (isinstance(k, builtins.slice) and k == _WHOLE)]
    if len(arrays) != 1 or any(k is Ellipsis or k is None for k in key):
        return None
    i, k = arrays[0]
    k = np.asarray(k.get() if hasattr(k, "get") else k)
    return (i, k.astype(np.int64)) if k.dtype.kind in "iu" else None


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


@builds(ix.Gather)
def handle_gather(ctx: NodeContext, xs: list) -> Tensor:
    """Gather(axis)."""
    return autograd.gather(xs[0], int(ctx.attr("axis", 0)), xs[1])


@builds(ix.Where)
def handle_where(ctx: NodeContext, xs: list) -> Tensor:
    """Where(condition, X, Y)."""
    c, x, y = xs
    return autograd.where(x, y, c)


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


@builds(ix.ScatterElements)
def handle_tensor_scatter(ctx: NodeContext, xs: list) -> Tensor:
    """TensorScatter (opset 24, a KV-cache update): ``update`` written into a copy of
    ``past_cache`` along ``axis`` (not 0) from each batch row's ``write_indices`` (0 when
    absent); ``mode`` "linear" (the write must fit) or "circular" (positions wrap).
    ScatterElements with those positions, so gradients reach both inputs."""
    past, update = xs[0], xs[1]
    axis = int(ctx.attr("axis", -2)) % past.ndim()
    mode = ctx.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise ctx.unsupported(f"mode {mode!r} (linear or circular)")
    size, n = past.shape[axis], update.shape[axis]
    starts = np.zeros(past.shape[0], np.int64) if len(xs) < 3 or xs[2] is None else ctx.static(xs[2])
    steps = [1] * past.ndim()
    steps[axis] = n
    pos = np.asarray(starts, np.int64).reshape(-1, *[1] * (past.ndim() - 1)) + np.arange(n).reshape(steps)
    if mode == "circular":
        pos %= size
    elif pos.size and (pos.max() >= size or pos.min() < 0):
        raise ValueError(
            f"ONNX run: TensorScatter node {ctx.name!r}: writes at positions {int(pos.min())}.."
            f"{int(pos.max())} of an axis of {size} (mode linear)"
        )
    idx = np.broadcast_to(pos, update.shape).astype(np.int64)
    return ix.scatter_elements(past, ctx.const(idx), update, axis)


@builds(ix.Where)
def handle_trilu(ctx: NodeContext, xs: list) -> Tensor:
    """Trilu: the upper (``upper=1``) or lower triangle from diagonal ``k`` of the last
    two axes, zeros elsewhere."""
    x = xs[0]
    k = int(ctx.static(xs[1]).reshape(())) if len(xs) > 1 and xs[1] is not None else 0
    full = np.ones(x.shape[-2:], bool)
    keep = np.triu(full, k) if int(ctx.attr("upper", 1)) else np.tril(full, k)
    return ix.where(x, ctx.const(0, x.dtype), ctx.const(keep))


EXPORT = {
    ix.Gather: convert_gather,
    ix.Embedding: convert_embedding,
    ix.Where: convert_where,
    ix.GetItem: convert_getitem,
    ix.OneHot: convert_onehot,
    ix.NonZero: convert_nonzero,
    ix.ScatterElements: convert_scatter_elements,
}

IMPORT = {
    "Gather": handle_gather,
    "Where": handle_where,
    "Trilu": handle_trilu,
    "OneHot": handle_onehot,
    "NonZero": handle_nonzero,
    "ScatterElements": handle_scatter_elements,
    "Scatter": handle_scatter_elements,
    "TensorScatter": handle_tensor_scatter,
}
