"""Self-gated activations (:mod:`singa.autograd.gated`): ONNX export and import.

``silu`` is ``Mul(x, Sigmoid(x))`` (ONNX has no SiLU node before Swish); import
leaves that pair to the activation and elementwise families."""

from __future__ import annotations

from typing import Any

from singa.autograd import gated
from singa.sonnx.context import ExportContext


def convert_silu(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Mul(x, Sigmoid(x))."""
    ctx.node("Mul", [ins[0], ctx.node("Sigmoid", ins, 1)[0]], outs)


EXPORT = {gated.SiLU: convert_silu}
IMPORT: dict = {}
