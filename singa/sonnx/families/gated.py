"""Self-gated activations (:mod:`singa.autograd.gated`): ONNX export and import.

- ``silu`` is ``Mul(x, Sigmoid(x))`` (ONNX has no SiLU node before Swish); import
  leaves that pair to the activation and elementwise families.
- ``hardswish`` is ONNX HardSwish from opset 14, before it ``Mul(x, HardSigmoid(x,
  alpha=1/6, beta=1/2))``; HardSwish imports as ``hardswish``.
- ``mish`` is ONNX Mish from opset 18, before it ``Mul(x, Tanh(Softplus(x)))``; Mish
  imports as ``mish``.
"""

from __future__ import annotations

from typing import Any

from singa.autograd import gated
from singa.sonnx.context import ExportContext, unary_handler

#: the first opsets with a HardSwish and a Mish node
HARDSWISH_OPSET = 14
MISH_OPSET = 18


def convert_silu(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Mul(x, Sigmoid(x))."""
    ctx.node("Mul", [ins[0], ctx.node("Sigmoid", ins, 1)[0]], outs)


def convert_hardswish(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """HardSwish (opset 14+), else Mul(x, HardSigmoid(x, alpha=1/6, beta=1/2))."""
    if ctx.opset >= HARDSWISH_OPSET:
        ctx.node("HardSwish", ins, outs)
        return
    gate = ctx.node("HardSigmoid", ins, 1, alpha=1.0 / 6.0, beta=0.5)[0]
    ctx.node("Mul", [ins[0], gate], outs)


def convert_mish(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Mish (opset 18+), else Mul(x, Tanh(Softplus(x)))."""
    if ctx.opset >= MISH_OPSET:
        ctx.node("Mish", ins, outs)
        return
    gate = ctx.node("Tanh", ctx.node("Softplus", ins, 1), 1)[0]
    ctx.node("Mul", [ins[0], gate], outs)


EXPORT = {
    gated.SiLU: convert_silu,
    gated.HardSwish: convert_hardswish,
    gated.Mish: convert_mish,
}
IMPORT = {
    "HardSwish": unary_handler(gated.hardswish, gated.HardSwish),
    "Mish": unary_handler(gated.mish, gated.Mish),
}
