"""Shape operators (:mod:`singa.autograd.shaping`) and constants: ONNX export and import.

With a dynamic batch, the sizes that depend on the batch (found by comparing the two
traces, see :mod:`singa.sonnx.trace`) are written so that they follow the input: a
Reshape target uses ``0`` or ``-1`` there, an Expand target ``1``, an equal Split no
sizes, a Slice to the end an open end.

Identity, Constant, ConstantOfShape, Shape and Size build no operator: their values are
computed when the node runs.
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np
from onnx import numpy_helper

from singa import autograd
from singa.autograd import shaping as sh
from singa.sonnx import computed
from singa.sonnx.context import ExportContext, NodeContext, batch_aware, builds, cast_to
from singa.tensor import Tensor

# ----- export --------------------------------------------------------------------------------


I64_MAX = int(np.iinfo(np.int64).max)


I64_MIN = int(np.iinfo(np.int64).min)


@batch_aware
def convert_reshape(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Reshape to the traced output shape; sizes that depend on the batch are written as
    0 (copied from the input) where the input has the same size there, else as the one
    -1 (inferred)."""
    out1 = list(ys[0].shape)
    if not ctx.dynamic_batch:
        target = list(op.shape)
    else:
        in1, in2, out2 = xs[0].shape, ctx.ins2[0].shape, ctx.outs2[0].shape
        target = []
        infer = []
        for i, (a, b) in enumerate(zip(out1, out2)):
            if a == b:
                target.append(int(a))
            elif i < len(in1) and in1[i] == a and in2[i] == b:
                target.append(0)
            else:
                target.append(-1)
                infer.append(i)
        if len(infer) > 1:
            raise ctx.error(
                op,
                f"the target shape {tuple(out1)} has several sizes that depend on the batch size; "
                "export with dynamic_batch=False",
            )
        if 0 in out1 and 0 in target:
            raise ctx.error(op, "a reshape to an empty tensor cannot follow a dynamic batch")
    ctx.node("Reshape", [ins[0], ctx.ints(target, "shape")], outs)


def convert_flatten(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Flatten(axis)."""
    ctx.node("Flatten", ins, outs, axis=int(op.axis))


def convert_transpose(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Transpose(perm) (the reversed axes when no permutation was given)."""
    perm = list(range(xs[0].ndim))[::-1] if op.perm is None else [int(p) for p in op.perm]
    ctx.node("Transpose", ins, outs, perm=perm)


def convert_concat(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Concat(axis)."""
    dt = ys[0].dtype
    ctx.node("Concat", [cast_to(ctx, n, a.dtype, dt) for n, a in zip(ins, xs)], outs, axis=int(op.axis))


@batch_aware
def convert_split(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Split(axis) with the sizes as an input (opset 13+) or attribute; equal parts whose
    size depends on the batch are written as an equal split."""
    parts = [int(p) for p in op.parts]
    if ctx.op2 is not None and list(ctx.op2.parts) != parts:
        if len(set(parts)) != 1 or len(set(ctx.op2.parts)) != 1:
            raise ctx.error(op, f"unequal split sizes {parts} depend on the batch size")
        if ctx.opset >= 18:
            ctx.node("Split", ins, outs, axis=int(op.axis), num_outputs=len(parts))
        else:
            ctx.node("Split", ins, outs, axis=int(op.axis))
        return
    if ctx.opset >= 13:
        ctx.node("Split", [ins[0], ctx.ints(parts, "split")], outs, axis=int(op.axis))
    else:
        ctx.node("Split", ins, outs, axis=int(op.axis), split=parts)


def clamp(v: int) -> int:
    """``v`` clipped to int64 (ONNX Slice bounds)."""
    return builtins.max(builtins.min(int(v), I64_MAX), I64_MIN)


def slice_node(ctx: ExportContext, x: str, entries: list, out: str | None) -> str:
    """A Slice over (axis, start, end, step) entries; Identity when there are none."""
    outputs = [out] if out is not None else 1
    if not entries:
        return ctx.node("Identity", [x], outputs)[0]
    axes, starts, ends, steps = zip(*entries)
    inputs = [
        x,
        ctx.ints([clamp(s) for s in starts], "starts"),
        ctx.ints([clamp(e) for e in ends], "ends"),
        ctx.ints(axes, "axes"),
        ctx.ints(steps, "steps"),
    ]
    return ctx.node("Slice", inputs, outputs)[0]


@batch_aware
def convert_slice(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Slice with the operator's own starts/ends/axes/steps (ONNX semantics). With a
    dynamic batch, an end that is the full (batch-dependent) size becomes open-ended."""
    r = xs[0].ndim
    rows = _slice_rows(op, r)
    if ctx.op2 is not None:
        rows2 = _slice_rows(ctx.op2, r)
        fixed = []
        for (a, s, e, st), (_, s2, e2, st2) in zip(rows, rows2):
            if (s, st) != (s2, st2):
                raise ctx.error(op, "slice starts or steps depend on the batch size")
            if e != e2:
                if not (st > 0 and e == xs[0].shape[a] and e2 == ctx.ins2[0].shape[a]):
                    raise ctx.error(op, "slice ends depend on the batch size")
                e = I64_MAX
            fixed.append((a, s, e, st))
        rows = fixed
    slice_node(ctx, ins[0], rows, outs[0])


def _slice_rows(op: Any, r: int) -> list:
    starts = sh.axes_list(op.starts)
    ends = sh.axes_list(op.ends)
    axes = list(range(len(starts))) if op.axes is None else sh.axes_list(op.axes)
    steps = [1] * len(starts) if op.steps is None else sh.axes_list(op.steps)
    return [(a % r, s, e, st) for s, e, a, st in zip(starts, ends, axes, steps)]


def convert_squeeze(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Squeeze with explicit axes (the size-1 axes of the traced input when None)."""
    axes = op.axes
    if axes is None:  # the axes of size 1 at every batch size
        other = ctx.ins2[0].shape if ctx.ins2 is not None else xs[0].shape
        axes = [i for i, (d, e) in enumerate(zip(xs[0].shape, other)) if d == 1 and e == 1]
    extra, attrs = ctx.axes_arg("Squeeze", axes, since=13)
    ctx.node("Squeeze", ins + extra, outs, **attrs)


def convert_unsqueeze(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Unsqueeze(axes)."""
    extra, attrs = ctx.axes_arg("Unsqueeze", op.axes, since=13)
    ctx.node("Unsqueeze", ins + extra, outs, **attrs)


def convert_pad(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Pad(mode) with pads and the constant value as inputs."""
    inputs = [ins[0], ctx.ints(op.pads, "pads")]
    if op.mode == "constant":
        inputs.append(ctx.const(np.asarray(op.constant, dtype=xs[0].dtype), hint="pad_value"))
    ctx.node("Pad", inputs, outs, mode=op.mode)


@batch_aware
def convert_expand(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Expand to ``op.shape``; a batch-dependent size that the input already has is
    written as 1 (broadcasting keeps it)."""
    shape = [int(s) for s in op.shape]
    if ctx.op2 is not None:
        other = [int(s) for s in ctx.op2.shape]
        if len(other) != len(shape):
            raise ctx.error(op, "the expanded rank depends on the batch size")
        off = len(shape) - xs[0].ndim
        for i, (a, b) in enumerate(zip(shape, other)):
            if a == b:
                continue
            j = i - off
            if j >= 0 and xs[0].shape[j] == a and ctx.ins2[0].shape[j] == b:
                shape[i] = 1
            else:
                raise ctx.error(op, f"the expanded shape {tuple(shape)} depends on the batch size")
    ctx.node("Expand", [ins[0], ctx.ints(shape, "shape")], outs)


def convert_tile(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Tile with the operator's repeats (one per axis, as ONNX wants: an Unsqueeze first
    adds the leading axes that repeats has beyond the input's)."""
    x = ins[0]
    extra_axes = len(op.repeats) - xs[0].ndim
    if extra_axes > 0:
        more, attrs = ctx.axes_arg("Unsqueeze", range(extra_axes), since=13)
        x = ctx.node("Unsqueeze", [x, *more], 1, **attrs)[0]
    ctx.node("Tile", [x, ctx.ints(op.repeats, "repeats")], outs)


# ----- import --------------------------------------------------------------------------------


def _ints(ctx: NodeContext, t: Tensor | None) -> list[int] | None:
    v = ctx.static(t)
    return None if v is None else [int(a) for a in v.reshape(-1)]


def _axes(ctx: NodeContext, xs: list, index: int, since: int) -> list[int] | None:
    """Axes from input ``index`` (opset ``since``+) or the ``axes`` attribute."""
    if ctx.opset >= since:
        return _ints(ctx, xs[index]) if len(xs) > index else None
    a = ctx.attr("axes")
    return None if a is None else list(a)


@builds(sh.Reshape)
def handle_reshape(ctx: NodeContext, xs: list) -> Tensor:
    """Reshape (0 copies the input dim unless ``allowzero``)."""
    x = xs[0]
    shape = _ints(ctx, xs[1])
    if int(ctx.attr("allowzero", 0)) and 0 in shape:
        if x.size() != 0 or -1 in shape:
            raise ctx.unsupported("allowzero with a 0 in the shape of a non-empty tensor")
        return ctx.wrap(x.data.reshape(shape))
    return autograd.reshape(x, shape)


@builds(sh.Flatten)
def handle_flatten(ctx: NodeContext, xs: list) -> Tensor:
    """Flatten(axis=1)."""
    return autograd.flatten(xs[0], int(ctx.attr("axis", 1)))


@builds(sh.Transpose)
def handle_transpose(ctx: NodeContext, xs: list) -> Tensor:
    """Transpose(perm) (reversed axes by default)."""
    perm = ctx.attr("perm")
    return autograd.transpose(xs[0], None if perm is None else list(perm))


@builds(sh.Cat)
def handle_concat(ctx: NodeContext, xs: list) -> Tensor:
    """Concat(axis) (empty inputs are left out)."""
    parts = [x for x in xs if x is not None]
    axis = int(ctx.attr("axis"))
    nonempty = [x for x in parts if x.size() > 0]
    if len(nonempty) != len(parts) and nonempty:
        parts = nonempty
    if len(parts) == 1:
        return parts[0]
    return autograd.cat(parts, axis)


@builds(sh.Split)
def handle_split(ctx: NodeContext, xs: list) -> Any:
    """Split(axis) by the ``split`` sizes (input from opset 13), or into ``num_outputs``
    (opset 18) / as many outputs as the node has."""
    x = xs[0]
    axis = int(ctx.attr("axis", 0)) % x.ndim()
    sizes = _ints(ctx, xs[1]) if ctx.opset >= 13 and len(xs) > 1 else ctx.attr("split")
    if sizes is None:
        n = int(ctx.attr("num_outputs", len(ctx.node.output)))
        d = x.shape[axis]
        chunk = -(-d // n)
        sizes = [min(chunk, d - i * chunk) for i in range(n)]
    return list(autograd.split(x, axis, list(sizes)))


@builds(sh.Slice)
def handle_slice(ctx: NodeContext, xs: list) -> Tensor:
    """Slice with starts/ends/axes/steps inputs."""
    starts, ends = _ints(ctx, xs[1]), _ints(ctx, xs[2])
    axes = _ints(ctx, xs[3]) if len(xs) > 3 else None
    steps = _ints(ctx, xs[4]) if len(xs) > 4 else None
    return autograd.slice(xs[0], starts, ends, axes, steps)


@builds(sh.Squeeze)
def handle_squeeze(ctx: NodeContext, xs: list) -> Tensor:
    """Squeeze (every size-1 axis when no axes are given)."""
    return autograd.squeeze(xs[0], _axes(ctx, xs, 1, 13))


@builds(sh.Unsqueeze)
def handle_unsqueeze(ctx: NodeContext, xs: list) -> Tensor:
    """Unsqueeze(axes)."""
    return autograd.unsqueeze(xs[0], _axes(ctx, xs, 1, 13))


@builds(sh.Pad, sh.Slice, sh.Cat)
def handle_pad(ctx: NodeContext, xs: list) -> Tensor:
    """Pad in modes constant, reflect and edge (optional constant_value and axes)."""
    x = xs[0]
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ctx.unsupported(f"mode {mode!r}")
    pads = _ints(ctx, xs[1])
    value = 0.0
    if len(xs) > 2 and xs[2] is not None:
        value = ctx.static(xs[2]).reshape(-1)[0].item() if xs[2].size() else 0.0
    axes = _ints(ctx, xs[3]) if len(xs) > 3 else None
    r = x.ndim()
    if axes is not None:
        full = [0] * (2 * r)
        k = len(axes)
        for i, a in enumerate(axes):
            a %= r
            full[a], full[a + r] = pads[i], pads[i + k]
        pads = full
    if mode == "wrap":
        return _wrap_pad(x, pads)
    return autograd.pad(x, mode, pads, value)


def _wrap_pad(x: Tensor, pads: list[int]) -> Tensor:
    """Circular padding from slices and concatenation (so it is differentiable)."""
    r = x.ndim()
    for a in range(r):
        b, e = pads[a], pads[a + r]
        d = x.shape[a]
        if b < 0 or e < 0:
            x = autograd.slice(x, [max(-b, 0)], [d - max(-e, 0)], [a])
            b, e, d = max(b, 0), max(e, 0), x.shape[a]
        parts = []
        if b:
            parts.append(autograd.slice(x, [d - b], [d], [a]))
        parts.append(x)
        if e:
            parts.append(autograd.slice(x, [0], [e], [a]))
        if len(parts) > 1:
            x = autograd.cat(parts, a)
    return x


@builds(sh.Expand)
def handle_expand(ctx: NodeContext, xs: list) -> Tensor:
    """Expand (bidirectional broadcast to the shape input)."""
    return autograd.expand(xs[0], _ints(ctx, xs[1]))


@builds(sh.Tile)
def handle_tile(ctx: NodeContext, xs: list) -> Tensor:
    """Tile (one repeat count per axis)."""
    return autograd.tile(xs[0], _ints(ctx, xs[1]))


@builds()
def handle_constant(ctx: NodeContext, xs: list) -> Tensor:
    """Constant from ``value`` or ``value_float(s)`` / ``value_int(s)``."""
    a = ctx.attrs
    if "value" in a:
        arr = numpy_helper.to_array(a["value"])
    elif "value_float" in a:
        arr = np.asarray(a["value_float"], np.float32)
    elif "value_floats" in a:
        arr = np.asarray(a["value_floats"], np.float32)
    elif "value_int" in a:
        arr = np.asarray(a["value_int"], np.int64)
    elif "value_ints" in a:
        arr = np.asarray(a["value_ints"], np.int64)
    else:
        raise ctx.unsupported(f"attribute {sorted(a)} (sparse and string constants are not supported)")
    if arr.dtype.kind not in "biuf":
        raise ctx.unsupported(f"element type {arr.dtype}")
    return ctx.const(arr)


@builds()
def handle_size(ctx: NodeContext, xs: list) -> Tensor:
    """Size: the number of elements, an int64 scalar."""
    return ctx.const(np.asarray(xs[0].size(), np.int64))


# ----- tables --------------------------------------------------------------------------------
EXPORT = {
    sh.Reshape: convert_reshape,
    sh.Flatten: convert_flatten,
    sh.Transpose: convert_transpose,
    sh.Cat: convert_concat,
    sh.Split: convert_split,
    sh.Slice: convert_slice,
    sh.Squeeze: convert_squeeze,
    sh.Unsqueeze: convert_unsqueeze,
    sh.Pad: convert_pad,
    sh.Expand: convert_expand,
    sh.Tile: convert_tile,
}

IMPORT = {
    "Reshape": handle_reshape,
    "Flatten": handle_flatten,
    "Transpose": handle_transpose,
    "Concat": handle_concat,
    "Split": handle_split,
    "Slice": handle_slice,
    "Squeeze": handle_squeeze,
    "Unsqueeze": handle_unsqueeze,
    "Pad": handle_pad,
    "Expand": handle_expand,
    "Tile": handle_tile,
    "Constant": handle_constant,
    "Size": handle_size,
    **computed.IMPORT,
}
