"""ONNX converters for :mod:`singa.autograd.loss` (for exporting training graphs).

Each loss is a tensor of shape (1,), the mean over the batch, as in SINGA.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.autograd import loss
from singa.sonnx.export import ExportContext
from singa.sonnx.export_elementwise import cast_to


def convert_softmax_cross_entropy(
    ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple
) -> None:
    """Class indices: SoftmaxCrossEntropyLoss (classes moved to axis 1); one-hot or soft
    labels: -mean over samples of sum(t * LogSoftmax(x)) along the last axis."""
    x, t = ins
    r = xs[0].ndim
    if xs[1].ndim == r - 1:  # class indices
        if r > 2:
            x = ctx.node("Transpose", [x], 1, perm=[0, r - 1] + list(range(1, r - 1)))[0]
        labels = cast_to(ctx, t, xs[1].dtype, np.int64)
        scalar = ctx.node("SoftmaxCrossEntropyLoss", [x, labels], 1, reduction="mean")[0]
    else:
        logp = ctx.node("LogSoftmax", [x], 1, axis=r - 1)[0]
        prod = ctx.node("Mul", [cast_to(ctx, t, xs[1].dtype, xs[0].dtype), logp], 1)[0]
        extra, attrs = ctx.axes_arg("ReduceSum", [r - 1], since=13)
        per = ctx.node("ReduceSum", [prod] + extra, 1, keepdims=0, **attrs)[0]
        mean = ctx.node("ReduceMean", [per], 1, keepdims=0)[0]
        scalar = ctx.node("Neg", [mean], 1)[0]
    ctx.node("Reshape", [scalar, ctx.ints([1], "shape")], outs)


CONVERTERS = {
    loss.SoftMaxCrossEntropy: convert_softmax_cross_entropy,
}
