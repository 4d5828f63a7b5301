"""Max, Min, Sum and Mean over several tensors (:mod:`singa.autograd.variadic`): ONNX
export and import, one variadic node each way."""

from __future__ import annotations

from typing import Any

from singa.autograd import variadic as va
from singa.sonnx.context import ExportContext, NodeContext, builds
from singa.tensor import Tensor


def _converter(op_type: str):
    def convert(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
        ctx.node(op_type, ins, outs)

    convert.__name__ = f"convert_{op_type.lower()}"
    return convert


def _handler(op: type, fn=None):
    @builds(op)
    def handle(ctx: NodeContext, xs: list) -> Tensor:
        xs = [x for x in xs if x is not None]
        return fn(*xs) if fn is not None else op()(*xs)[0]

    handle.__doc__ = f"{op.__name__} of the node's inputs (broadcast)."
    return handle


EXPORT = {
    va.Max: _converter("Max"),
    va.Min: _converter("Min"),
    va.Sum: _converter("Sum"),
    va.Mean: _converter("Mean"),
}
IMPORT = {
    "Max": _handler(va.Max, va.max),
    "Min": _handler(va.Min, va.min),
    "Sum": _handler(va.Sum),
    "Mean": _handler(va.Mean),
}
