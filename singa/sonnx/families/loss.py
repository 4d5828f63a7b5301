"""Losses (:mod:`singa.autograd.loss`): ONNX export (for training graphs) and import.

Each exported loss is a tensor of shape (1,), the mean over the batch, as in SINGA. The
imported ONNX losses are compositions (log-softmax, products and sums), since ONNX's
class weights, ``ignore_index`` and reductions have no single autograd operator.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa import autograd
from singa.autograd import activation as act
from singa.autograd import elementwise as ew
from singa.autograd import loss, reduction
from singa.sonnx.context import ExportContext, NodeContext, builds, cast_to
from singa.tensor import Tensor

# ----- export --------------------------------------------------------------------------------


def convert_softmax_cross_entropy(
    ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple
) -> None:
    """Class indices: SoftmaxCrossEntropyLoss (classes moved to axis 1); one-hot or soft
    labels: -mean over samples of sum(t * LogSoftmax(x)) along the last axis."""
    x, t = ins
    r = xs[0].ndim
    if loss.is_index_target(xs[0].shape, xs[1].shape):
        labels = _index_labels(ctx, t, xs)
        scalar = ctx.node(
            "SoftmaxCrossEntropyLoss", [_classes_to_axis1(ctx, x, r), labels], 1, reduction="mean"
        )[0]
    else:
        logp = ctx.node("LogSoftmax", [x], 1, axis=r - 1)[0]
        prod = ctx.node("Mul", [cast_to(ctx, t, xs[1].dtype, xs[0].dtype), logp], 1)[0]
        scalar = _mean_of_row_sums(ctx, prod, r)
    _to_shape1(ctx, scalar, outs)


def _index_labels(ctx: ExportContext, t: str, xs: list) -> str:
    """Class indices as int64 of shape x.shape[:-1] (a trailing 1 squeezed away)."""
    labels = cast_to(ctx, t, xs[1].dtype, np.int64)
    r = xs[0].ndim
    if xs[1].ndim == r - 1:
        return labels
    extra, attrs = ctx.axes_arg("Squeeze", [r - 1], since=13)
    return ctx.node("Squeeze", [labels] + extra, 1, **attrs)[0]


def _classes_to_axis1(ctx: ExportContext, x: str, r: int) -> str:
    """Move the class axis (last) to axis 1, where ONNX's losses expect it."""
    if r <= 2:
        return x
    return ctx.node("Transpose", [x], 1, perm=[0, r - 1] + list(range(1, r - 1)))[0]


def _clamped_log(ctx: ExportContext, x: str, dtype) -> str:
    """max(log(x), -100), as the losses compute it."""
    return ctx.node("Max", [ctx.node("Log", [x], 1)[0], ctx.const(np.asarray(-100.0, dtype=dtype))], 1)[0]


def _to_shape1(ctx: ExportContext, scalar: str, outs: list) -> None:
    ctx.node("Reshape", [scalar, ctx.ints([1], "shape")], outs)


def _mean_of_row_sums(ctx: ExportContext, prod: str, r: int) -> str:
    """-mean over the rows of the sums along the last axis."""
    extra, attrs = ctx.axes_arg("ReduceSum", [r - 1], since=13)
    per = ctx.node("ReduceSum", [prod] + extra, 1, keepdims=0, **attrs)[0]
    return ctx.node("Neg", [ctx.node("ReduceMean", [per], 1, keepdims=0)[0]], 1)[0]


def convert_cross_entropy(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """-sum(t * max(log y, -100)) / N: NegativeLogLikelihoodLoss for class indices."""
    y, t = ins
    r = xs[0].ndim
    logy = _clamped_log(ctx, y, xs[0].dtype)
    if loss.is_index_target(xs[0].shape, xs[1].shape):
        labels = _index_labels(ctx, t, xs)
        scalar = ctx.node("NegativeLogLikelihoodLoss", [_classes_to_axis1(ctx, logy, r), labels], 1)[0]
    else:
        prod = ctx.node("Mul", [cast_to(ctx, t, xs[1].dtype, xs[0].dtype), logy], 1)[0]
        scalar = _mean_of_row_sums(ctx, prod, r)
    _to_shape1(ctx, scalar, outs)


def convert_nll_loss(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """NegativeLogLikelihoodLoss (mean) with the classes moved to axis 1."""
    x, t = ins
    labels = _index_labels(ctx, t, xs)
    scalar = ctx.node("NegativeLogLikelihoodLoss", [_classes_to_axis1(ctx, x, xs[0].ndim), labels], 1)[0]
    _to_shape1(ctx, scalar, outs)


def convert_mse_loss(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """mean((x - t)^2) over all elements."""
    d = ctx.node("Sub", [ins[0], cast_to(ctx, ins[1], xs[1].dtype, xs[0].dtype)], 1)[0]
    sq = ctx.node("Mul", [d, d], 1)[0]
    _to_shape1(ctx, ctx.node("ReduceMean", [sq], 1, keepdims=0)[0], outs)


def convert_binary_cross_entropy(
    ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple
) -> None:
    """-mean(t max(log x, -100) + (1 - t) max(log(1 - x), -100))."""
    dt = xs[0].dtype
    x = ins[0]
    t = cast_to(ctx, ins[1], xs[1].dtype, dt)
    one = ctx.const(np.asarray(1.0, dtype=dt))
    a = ctx.node("Mul", [t, _clamped_log(ctx, x, dt)], 1)[0]
    b = ctx.node(
        "Mul",
        [ctx.node("Sub", [one, t], 1)[0], _clamped_log(ctx, ctx.node("Sub", [one, x], 1)[0], dt)],
        1,
    )[0]
    mean = ctx.node("ReduceMean", [ctx.node("Add", [a, b], 1)[0]], 1, keepdims=0)[0]
    _to_shape1(ctx, ctx.node("Neg", [mean], 1)[0], outs)


def convert_ranking_loss(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """sum(relu(M - pos + neg)) / N as the mean over axis 0 of the sums over the others
    (so N follows a dynamic batch)."""
    pos, neg = ins
    m = ctx.const(np.asarray(op.M, dtype=xs[0].dtype), hint="margin")
    h = ctx.node("Relu", [ctx.node("Add", [ctx.node("Sub", [neg, pos], 1)[0], m], 1)[0]], 1)[0]
    r = xs[0].ndim
    if r > 1:
        extra, attrs = ctx.axes_arg("ReduceSum", list(range(1, r)), since=13)
        h = ctx.node("ReduceSum", [h] + extra, 1, keepdims=0, **attrs)[0]
    _to_shape1(ctx, ctx.node("ReduceMean", [h], 1, keepdims=0)[0], outs)


# ----- import --------------------------------------------------------------------------------


def _nll(ctx: NodeContext, logp: Tensor, labels: Tensor, weight: Tensor | None) -> Tensor:
    """ONNX NegativeLogLikelihoodLoss of log-probabilities (N, C, d...) and labels
    (N, d...), with optional class weights, ignore_index and reduction."""
    reduction = ctx.attr("reduction", "mean")
    if reduction not in ("mean", "sum", "none"):
        raise ctx.unsupported(f"reduction {reduction!r}")
    lab = labels.to_numpy().astype(np.int64)
    c = logp.shape[1]
    ignore = ctx.attr("ignore_index")
    valid = np.ones(lab.shape, bool) if ignore is None else lab != int(ignore)
    safe = np.where(valid, lab, 0)
    if ((safe < 0) | (safe >= c)).any():
        raise ValueError(f"ONNX import: {ctx.op_type} node {ctx.name!r}: labels out of range [0, {c})")
    w = valid.astype(np.float64)
    if weight is not None:
        w = w * weight.to_numpy().astype(np.float64)[safe]
    onehot = np.moveaxis(np.eye(c, dtype=np.float64)[safe], -1, 1) * np.expand_dims(w, 1)
    picked = autograd.mul(logp, ctx.const(onehot, logp.dtype))
    per = autograd.neg(autograd.reduce_sum(picked, [1], 0))
    if reduction == "none":
        return per
    total = autograd.reduce_sum(per, None, 0)
    if reduction == "sum":
        return total
    return autograd.div(total, ctx.const(w.sum(), logp.dtype))


@builds(act.LogSoftMax, ew.Mul, reduction.ReduceSum, ew.Neg, ew.Div)
def handle_softmax_cross_entropy(ctx: NodeContext, xs: list) -> Any:
    """SoftmaxCrossEntropyLoss (scores with classes on axis 1), with the optional
    log_prob output."""
    scores, labels = xs[0], xs[1]
    weight = xs[2] if len(xs) > 2 else None
    logp = autograd.log_softmax(scores, axis=1)
    loss = _nll(ctx, logp, labels, weight)
    return [loss, logp] if ctx.outputs > 1 else loss


@builds(ew.Mul, reduction.ReduceSum, ew.Neg, ew.Div)
def handle_nll_loss(ctx: NodeContext, xs: list) -> Tensor:
    """NegativeLogLikelihoodLoss."""
    return _nll(ctx, xs[0], xs[1], xs[2] if len(xs) > 2 else None)


# ----- tables --------------------------------------------------------------------------------
EXPORT = {
    loss.SoftMaxCrossEntropy: convert_softmax_cross_entropy,
    loss.CrossEntropy: convert_cross_entropy,
    loss.NLLLoss: convert_nll_loss,
    loss.MSELoss: convert_mse_loss,
    loss.BinaryCrossEntropy: convert_binary_cross_entropy,
    loss.RankingLoss: convert_ranking_loss,
}

IMPORT = {
    "SoftmaxCrossEntropyLoss": handle_softmax_cross_entropy,
    "NegativeLogLikelihoodLoss": handle_nll_loss,
}
