"""``shape`` and ``constant_of_shape`` (:mod:`singa.autograd.creation`): ONNX export and
import (Shape, with opset 15's start/end as a Slice of it, and ConstantOfShape)."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import numpy_helper

from singa.autograd import creation as cr
from singa.autograd import shaping as sh
from singa.sonnx.context import ExportContext, NodeContext, builds, cast_to
from singa.tensor import Tensor

# ----- export --------------------------------------------------------------------------------


def convert_shape(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Shape."""
    ctx.node("Shape", ins, outs)


def convert_constant_of_shape(
    ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple
) -> None:
    """ConstantOfShape(value) of an int64 shape input."""
    shape = cast_to(ctx, ins[0], xs[0].dtype, np.int64)
    value = numpy_helper.from_array(np.asarray([op.value], dtype=op.value.dtype), "value")
    ctx.node("ConstantOfShape", [shape], outs, value=value)


# ----- import --------------------------------------------------------------------------------


@builds(cr.Shape, sh.Slice)
def handle_shape(ctx: NodeContext, xs: list) -> Tensor:
    """Shape, with the optional start/end (opset 15) as a slice of it."""
    y = cr.shape(xs[0])
    start, end = int(ctx.attr("start", 0)), ctx.attr("end")
    if start == 0 and end is None:
        return y
    return sh.slice(y, [start], [xs[0].ndim() if end is None else int(end)], [0])


@builds(cr.ConstantOfShape)
def handle_constant_of_shape(ctx: NodeContext, xs: list) -> Tensor:
    """ConstantOfShape(value) (a float32 0 by default)."""
    v = ctx.attr("value")
    fill = np.zeros(1, np.float32) if v is None else numpy_helper.to_array(v).reshape(-1)
    return cr.constant_of_shape(xs[0], fill[0])


EXPORT = {cr.Shape: convert_shape, cr.ConstantOfShape: convert_constant_of_shape}
IMPORT = {"Shape": handle_shape, "ConstantOfShape": handle_constant_of_shape}
