"""ONNX converter for :mod:`singa.autograd.cast`."""

from __future__ import annotations

from typing import Any

from singa.autograd.cast import Cast
from singa.sonnx.export import ExportContext, onnx_dtype


def convert_cast(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Cast to the operator's dtype."""
    ctx.node("Cast", [ins[0]], outs, to=onnx_dtype(op.to))


CONVERTERS = {Cast: convert_cast}
