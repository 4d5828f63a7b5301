"""Attention (:mod:`singa.autograd.attention`): ONNX export.

``scaled_dot_product_attention`` is written as its decomposition (MatMul, Mul, Where,
Softmax, MatMul; the causal mask built from the traced lengths with Shape/Range, so the
sequence length can be dynamic), or, with ``opset >= 23`` on (batch, heads, L, E)
inputs, as ONNX's ``Attention``. ``masked_softmax`` is Where/Softmax/Mul. Scores and
softmax are float32 for float16 inputs, as in the operator.

Import: ONNX has no node of either; ``Attention`` imports through the ``linalg``
family (:mod:`singa.sonnx.attention`) and the decompositions through their parts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto, helper

from singa.autograd import attention as att
from singa.sonnx.context import ExportContext, cast_to, onnx_dtype

ATTENTION_OPSET = 23


def _length(ctx: ExportContext, name: str, axis: int) -> str:
    """The size of axis ``axis`` of value ``name`` as a 1-element int64 (dynamic)."""
    shape = ctx.node("Shape", [name], 1)[0]
    return ctx.node("Slice", [shape, ctx.ints([axis]), ctx.ints([axis + 1])], 1)[0]


def _causal(ctx: ExportContext, q: str, k: str, rank: int) -> str:
    """(L, S) booleans, True where query i may attend key j (j <= i): running sums of a
    (L, S) block of ones down the rows (i + 1) and along them (j + 1), compared."""
    size = ctx.node("Concat", [_length(ctx, q, rank - 2), _length(ctx, k, rank - 2)], 1, axis=0)[0]
    one = helper.make_tensor("one", TensorProto.INT64, [1], [1])
    ones = ctx.node("ConstantOfShape", [size], 1, value=one)[0]
    rows = ctx.node("CumSum", [ones, ctx.const(np.asarray(0, np.int32))], 1)[0]
    cols = ctx.node("CumSum", [ones, ctx.const(np.asarray(1, np.int32))], 1)[0]
    return ctx.node("Not", [ctx.node("Less", [rows, cols], 1)[0]], 1)[0]


def _and(ctx: ExportContext, a: str | None, b: str) -> str:
    return b if a is None else ctx.node("And", [a, b], 1)[0]


def _masked_softmax(ctx: ExportContext, s: str, allowed: str | None, dt: Any, axis: int, out: Any = 1) -> str:
    """Softmax of ``s`` over the allowed positions (0 elsewhere and on empty rows)."""
    if allowed is None:
        return ctx.node("Softmax", [s], out, axis=axis)[0]
    low = ctx.const(np.asarray(np.finfo(dt).min, dt))
    p = ctx.node("Softmax", [ctx.node("Where", [allowed, s, low], 1)[0]], 1, axis=axis)[0]
    return ctx.node("Mul", [p, ctx.node("Cast", [allowed], 1, to=onnx_dtype(dt))[0]], out)[0]


def convert_sdpa(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """ONNX Attention (opset 23+, 4-D inputs), else the decomposition."""
    if op.dropout_p > 0:
        raise ctx.error(op, "attention dropout is random at run time; export the model in eval mode")
    rank = xs[0].ndim
    if ctx.opset >= ATTENTION_OPSET and rank == 4:
        ctx.node("Attention", ins, outs, is_causal=int(op.is_causal), scale=float(op.scale))
        return
    dt = np.dtype(att.compute_dtype(xs[0]))
    q, k, v = (cast_to(ctx, n, a.dtype, dt) for n, a in zip(ins[:3], xs[:3]))
    perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    s = ctx.node("MatMul", [q, ctx.node("Transpose", [k], 1, perm=perm)[0]], 1)[0]
    s = ctx.node("Mul", [s, ctx.const(np.asarray(op.scale, dt))], 1)[0]
    allowed = None
    if len(ins) > 3 and op.mask_is_bool:
        allowed = ins[3]
    elif len(ins) > 3:
        s = ctx.node("Add", [s, cast_to(ctx, ins[3], xs[3].dtype, dt)], 1)[0]
        finite = ctx.node("Not", [ctx.node("IsInf", [s], 1, detect_positive=0)[0]], 1)[0]
        allowed = finite
    if op.is_causal:
        allowed = _and(ctx, allowed, _causal(ctx, q, k, rank))
    p = _masked_softmax(ctx, s, allowed, dt, -1)
    if dt == xs[0].dtype:
        ctx.node("MatMul", [p, v], outs)
        return
    y = ctx.node("MatMul", [p, v], 1)[0]
    ctx.node("Cast", [y], outs, to=onnx_dtype(xs[0].dtype))


def convert_masked_softmax(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Where(mask, x, lowest) -> Softmax(axis) -> Mul(Cast(mask)); before opset 13
    Softmax works on the 2-D coercion, so another axis is moved last first."""
    dt = np.dtype(att.compute_dtype(xs[0]))
    x = cast_to(ctx, ins[0], xs[0].dtype, dt)
    r, axis = xs[0].ndim, op.axis
    mask = ins[1]
    last = axis == r - 1 or ctx.opset >= 13
    if not last:
        if xs[1].shape != xs[0].shape:
            mask = ctx.node("Expand", [mask, ctx.node("Shape", [x], 1)[0]], 1)[0]
        perm = [i for i in range(r) if i != axis] + [axis]
        x = ctx.node("Transpose", [x], 1, perm=perm)[0]
        mask = ctx.node("Transpose", [mask], 1, perm=perm)[0]
    same = dt == xs[0].dtype and last
    y = _masked_softmax(ctx, x, mask, dt, axis if last else r - 1, outs if same else 1)
    if same:
        return
    if not last:
        inv = list(np.argsort([i for i in range(r) if i != axis] + [axis]))
        y = ctx.node("Transpose", [y], 1 if dt != xs[0].dtype else outs, perm=[int(i) for i in inv])[0]
    if dt != xs[0].dtype:
        ctx.node("Cast", [y], outs, to=onnx_dtype(xs[0].dtype))


EXPORT = {
    att.ScaledDotProductAttention: convert_sdpa,
    att.MaskedSoftMax: convert_masked_softmax,
}

IMPORT: dict = {}
