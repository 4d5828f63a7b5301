"""ONNX import handlers: shape operators, constants and indexing."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import numpy_helper

from singa import autograd
from singa.sonnx.backend import NodeContext
from singa.tensor import Tensor


def _ints(ctx: NodeContext, t: Tensor | None) -> list[int] | None:
    v = ctx.static(t)
    return None if v is None else [int(a) for a in v.reshape(-1)]


def _axes(ctx: NodeContext, xs: list, index: int, since: int) -> list[int] | None:
    """Axes from input ``index`` (opset ``since``+) or the ``axes`` attribute."""
    if ctx.opset >= since:
        return _ints(ctx, xs[index]) if len(xs) > index else None
    a = ctx.attr("axes")
    return None if a is None else list(a)


def handle_reshape(ctx: NodeContext, xs: list) -> Tensor:
    """Reshape (0 copies the input dim unless ``allowzero``)."""
    x = xs[0]
    shape = _ints(ctx, xs[1])
    if int(ctx.attr("allowzero", 0)) and 0 in shape:
        if x.size() != 0 or -1 in shape:
            raise ctx.unsupported("allowzero with a 0 in the shape of a non-empty tensor")
        return ctx.wrap(x.data.reshape(shape))
    return autograd.reshape(x, shape)


def handle_flatten(ctx: NodeContext, xs: list) -> Tensor:
    """Flatten(axis=1)."""
    return autograd.flatten(xs[0], int(ctx.attr("axis", 1)))


def handle_transpose(ctx: NodeContext, xs: list) -> Tensor:
    """Transpose(perm) (reversed axes by default)."""
    perm = ctx.attr("perm")
    return autograd.transpose(xs[0], None if perm is None else list(perm))


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


def handle_slice(ctx: NodeContext, xs: list) -> Tensor:
    """Slice with starts/ends/axes/steps inputs."""
    starts, ends = _ints(ctx, xs[1]), _ints(ctx, xs[2])
    axes = _ints(ctx, xs[3]) if len(xs) > 3 else None
    steps = _ints(ctx, xs[4]) if len(xs) > 4 else None
    return autograd.slice(xs[0], starts, ends, axes, steps)


def handle_squeeze(ctx: NodeContext, xs: list) -> Tensor:
    """Squeeze (every size-1 axis when no axes are given)."""
    return autograd.squeeze(xs[0], _axes(ctx, xs, 1, 13))


def handle_unsqueeze(ctx: NodeContext, xs: list) -> Tensor:
    """Unsqueeze(axes)."""
    return autograd.unsqueeze(xs[0], _axes(ctx, xs, 1, 13))


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


def handle_expand(ctx: NodeContext, xs: list) -> Tensor:
    """Expand (bidirectional broadcast to the shape input)."""
    return autograd.expand(xs[0], _ints(ctx, xs[1]))


def handle_gather(ctx: NodeContext, xs: list) -> Tensor:
    """Gather(axis)."""
    return autograd.gather(xs[0], int(ctx.attr("axis", 0)), xs[1])


def handle_where(ctx: NodeContext, xs: list) -> Tensor:
    """Where(condition, X, Y)."""
    c, x, y = xs
    return autograd.where(x, y, c)


def handle_identity(ctx: NodeContext, xs: list) -> Tensor:
    """Identity."""
    return xs[0]


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


def handle_constant_of_shape(ctx: NodeContext, xs: list) -> Tensor:
    """ConstantOfShape(value) (a float32 0 by default)."""
    shape = _ints(ctx, xs[0])
    v = ctx.attr("value")
    fill = np.zeros(1, np.float32) if v is None else numpy_helper.to_array(v).reshape(-1)
    return ctx.const(np.full(shape, fill[0], dtype=fill.dtype))


def handle_shape(ctx: NodeContext, xs: list) -> Tensor:
    """Shape with the optional start/end (opset 15)."""
    shape = list(xs[0].shape)
    r = len(shape)
    start = int(ctx.attr("start", 0))
    end = ctx.attr("end")
    start = min(max(start + r if start < 0 else start, 0), r)
    end = r if end is None else min(max(int(end) + r if int(end) < 0 else int(end), 0), r)
    return ctx.const(np.asarray(shape[start:end], np.int64))


def handle_size(ctx: NodeContext, xs: list) -> Tensor:
    """Size: the number of elements, an int64 scalar."""
    return ctx.const(np.asarray(xs[0].size(), np.int64))


IMPORTERS = {
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
    "Gather": handle_gather,
    "Where": handle_where,
    "Identity": handle_identity,
    "Constant": handle_constant,
    "ConstantOfShape": handle_constant_of_shape,
    "Shape": handle_shape,
    "Size": handle_size,
}
