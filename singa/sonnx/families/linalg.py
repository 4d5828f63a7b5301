"""Matrix products (:mod:`singa.autograd.linalg`): ONNX export and import."""

from __future__ import annotations

from typing import Any

from singa import autograd
from singa.autograd import linalg
from singa.sonnx import attention, linear_attention
from singa.sonnx.context import ExportContext, NodeContext, builds, cast_to
from singa.tensor import Tensor

# ----- export --------------------------------------------------------------------------------


def convert_matmul(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """MatMul (numpy matmul semantics, as ONNX's)."""
    dt = ys[0].dtype
    ctx.node("MatMul", [cast_to(ctx, ins[0], xs[0].dtype, dt), cast_to(ctx, ins[1], xs[1].dtype, dt)], outs)


def convert_add_bias(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Add with the bias shaped to broadcast along rows (axis 0) or columns (axis 1)."""
    b = ins[1]
    if op.axis == 1 and xs[1].ndim == 1:
        b = ctx.node("Reshape", [b, ctx.ints([-1, 1], "shape")], 1)[0]
    ctx.node("Add", [ins[0], cast_to(ctx, b, xs[1].dtype, ys[0].dtype)], outs)


def convert_gemm(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Gemm with alpha, beta, transA, transB."""
    ctx.node(
        "Gemm",
        ins,
        outs,
        alpha=float(op.alpha),
        beta=float(op.beta),
        transA=int(op.transA),
        transB=int(op.transB),
    )


def convert_cossim(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """sum(a b) / sqrt(sum(a a) sum(b b)) along axis 1 (no ONNX op of its own)."""
    extra, attrs = ctx.axes_arg("ReduceSum", [1], since=13)

    def row_dot(p: str, q: str) -> str:
        return ctx.node("ReduceSum", [ctx.node("Mul", [p, q], 1)[0]] + extra, 1, keepdims=0, **attrs)[0]

    a, b = ins
    norms = ctx.node("Sqrt", [ctx.node("Mul", [row_dot(a, a), row_dot(b, b)], 1)[0]], 1)[0]
    ctx.node("Div", [row_dot(a, b), norms], outs)


# ----- import --------------------------------------------------------------------------------


@builds(linalg.MatMul)
def handle_matmul(ctx: NodeContext, xs: list) -> Tensor:
    """MatMul (numpy semantics, batched and 1-D operands included)."""
    return autograd.matmul(xs[0], xs[1])


@builds(linalg.Gemm)
def handle_gemm(ctx: NodeContext, xs: list) -> Tensor:
    """Gemm(alpha, beta, transA, transB) with an optional C."""
    c = xs[2] if len(xs) > 2 else None
    return autograd.gemm(
        xs[0],
        xs[1],
        c,
        alpha=float(ctx.attr("alpha", 1.0)),
        beta=float(ctx.attr("beta", 1.0)),
        transA=bool(ctx.attr("transA", 0)),
        transB=bool(ctx.attr("transB", 0)),
    )


def convert_det(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Det."""
    ctx.node("Det", ins, outs)


@builds(linalg.Det)
def handle_det(ctx: NodeContext, xs: list) -> Tensor:
    """Det of the matrices in the last two axes."""
    return linalg.det(xs[0])


# ----- tables --------------------------------------------------------------------------------
EXPORT = {
    linalg.MatMul: convert_matmul,
    linalg.AddBias: convert_add_bias,
    linalg.Gemm: convert_gemm,
    linalg.CosSim: convert_cossim,
    linalg.Det: convert_det,
}

IMPORT = {
    "MatMul": handle_matmul,
    "Gemm": handle_gemm,
    "Attention": attention.handle_attention,
    "LinearAttention": linear_attention.handle_linear_attention,
    "Det": handle_det,
}
