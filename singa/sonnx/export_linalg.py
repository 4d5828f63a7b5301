"""ONNX converters for :mod:`singa.autograd.linalg`."""

from __future__ import annotations

from typing import Any

from singa.autograd import linalg
from singa.sonnx.export import ExportContext
from singa.sonnx.export_elementwise import cast_to


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


CONVERTERS = {
    linalg.MatMul: convert_matmul,
    linalg.AddBias: convert_add_bias,
    linalg.Gemm: convert_gemm,
}
