"""Einstein summation (:mod:`singa.autograd.contraction`): ONNX Einsum (opset 12) export and
import; the exported equation is the explicit one (``...`` expanded)."""

from __future__ import annotations

from typing import Any

from singa.autograd import contraction as es
from singa.sonnx.context import ExportContext, NodeContext, builds
from singa.tensor import Tensor


def convert_einsum(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Einsum(equation) (opset 12 and newer)."""
    if ctx.opset < 12:
        raise ctx.error(op, f"Einsum needs opset 12 or later (exporting opset {ctx.opset})")
    ctx.node("Einsum", ins, outs, equation=op.equation)


@builds(es.Einsum)
def handle_einsum(ctx: NodeContext, xs: list) -> Tensor:
    """Einsum(equation)."""
    return es.einsum(ctx.attr("equation"), *xs)


EXPORT = {es.Einsum: convert_einsum}
IMPORT = {"Einsum": handle_einsum}
