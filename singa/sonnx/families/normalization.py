"""Normalization (:mod:`singa.autograd.normalization`): ONNX export and import."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa import autograd
from singa.autograd import elementwise as ew
from singa.autograd import normalization
from singa.autograd.indexing import Gather
from singa.autograd.reduction import ReduceMean, ReduceSum
from singa.autograd.shaping import Pad, Reshape, Slice
from singa.sonnx.context import ExportContext, NodeContext, builds, keep_dtype
from singa.tensor import Tensor

# ----- export --------------------------------------------------------------------------------


def convert_batchnorm(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """BatchNormalization with the running statistics (training_mode=1 when the
    operator ran in training mode, opset 14+)."""
    attrs: dict = {"epsilon": float(op.eps), "momentum": float(op.momentum)}
    if op.training:
        if ctx.opset < 14:
            raise ctx.error(op, "BatchNorm in training mode needs opset 14 or newer")
        attrs["training_mode"] = 1
    ctx.node("BatchNormalization", ins, outs, **attrs)


def convert_layer_norm(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """LayerNormalization (opset 17+), else mean/variance nodes."""
    r = xs[0].ndim
    axis = op.axis % r
    if ctx.opset >= 17:
        ctx.node("LayerNormalization", ins, outs, axis=axis, epsilon=float(op.eps))
        return
    dt = xs[0].dtype
    axes = list(range(axis, r))
    extra, attrs = ctx.axes_arg("ReduceMean", axes, since=18)
    x = ins[0]
    m = ctx.node("ReduceMean", [x] + extra, 1, keepdims=1, **attrs)[0]
    d = ctx.node("Sub", [x, m], 1)[0]
    v = ctx.node("ReduceMean", [ctx.node("Mul", [d, d], 1)[0]] + extra, 1, keepdims=1, **attrs)[0]
    s = ctx.node("Sqrt", [ctx.node("Add", [v, ctx.const(np.asarray(op.eps, dtype=dt))], 1)[0]], 1)[0]
    y = ctx.node("Mul", [ctx.node("Div", [d, s], 1)[0], ins[1]], [outs[0]] if len(ins) < 3 else 1)[0]
    if len(ins) > 2:
        ctx.node("Add", [y, ins[2]], outs)


# ----- import --------------------------------------------------------------------------------


@builds(normalization.BatchNorm2d)
def handle_batchnorm(ctx: NodeContext, xs: list) -> Any:
    """BatchNormalization. In training (``training_mode`` or a SONNXModel in train())
    it normalises with batch statistics and updates the running ones in place when they
    are the model's states (a SONNXModel's buffers, from initializers or Constant nodes),
    else copies of them; the optional running-stat outputs follow
    ONNX's formula (biased batch variance)."""
    x, scale, bias, mean, var = xs
    eps = float(ctx.attr("epsilon", 1e-5))
    mom = float(ctx.attr("momentum", 0.9))
    training = ctx.training or bool(ctx.attr("training_mode", 0))
    if not training:
        return keep_dtype(autograd.batchnorm_2d(x, scale, bias, mean, var, mom, eps, training=False), x.dtype)
    outs = []
    if ctx.outputs > 1:
        xa = x.to_numpy().astype(np.float64)
        axes = (0,) + tuple(range(2, x.ndim()))
        bm, bv = xa.mean(axis=axes), xa.var(axis=axes)
        outs = [
            ctx.const(mean.to_numpy() * mom + bm * (1 - mom), mean.dtype),
            ctx.const(var.to_numpy() * mom + bv * (1 - mom), var.dtype),
        ]
    # the update happens in place: only into the model's states (a SONNXModel in train());
    # inference with training_mode, or statistics from a Constant or a computed value: copies
    if not ctx.training or not ctx.is_state(mean):
        mean = ctx.const(mean.to_numpy())
    if not ctx.training or not ctx.is_state(var):
        var = ctx.const(var.to_numpy())
    y = keep_dtype(autograd.batchnorm_2d(x, scale, bias, mean, var, mom, eps, training=True), x.dtype)
    return [y] + outs


@builds(normalization.LayerNorm)
def handle_layer_norm(ctx: NodeContext, xs: list) -> Any:
    """LayerNormalization(axis, epsilon) with the optional Mean/InvStdDev outputs."""
    x, scale = xs[0], xs[1]
    bias = xs[2] if len(xs) > 2 else None
    axis = int(ctx.attr("axis", -1)) % x.ndim()
    eps = float(ctx.attr("epsilon", 1e-5))
    y = autograd.layer_norm(x, scale, bias, axis, eps)
    if ctx.outputs == 1:
        return y
    xa = x.to_numpy().astype(np.float32 if x.dtype.itemsize < 4 else x.dtype)
    axes = tuple(range(axis, x.ndim()))
    m = xa.mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(((xa - m) ** 2).mean(axis=axes, keepdims=True) + eps)
    stash = np.float32 if int(ctx.attr("stash_type", 1)) == 1 else x.dtype
    return [y, ctx.const(m, stash), ctx.const(inv, stash)]


@builds(ReduceMean, ew.Mul, ew.Add, ew.Sqrt, ew.Div, ew.Cast)
def handle_rms_norm(ctx: NodeContext, xs: list) -> Tensor:
    """RMSNormalization: ``x / sqrt(mean(x^2) + epsilon) * scale`` over the axes from
    ``axis`` on, in float32 or wider (``stash_type``)."""
    x, scale = xs[0], xs[1]
    axis = int(ctx.attr("axis", -1)) % x.ndim()
    eps = float(ctx.attr("epsilon", 1e-5))
    wide = x if x.dtype.itemsize >= 4 else ew.cast(x, np.float32)
    ms = autograd.reduce_mean(ew.mul(wide, wide), list(range(axis, x.ndim())), 1)
    rms = ew.sqrt(ew.add(ms, ctx.const(eps, wide.dtype)))
    y = ew.div(wide, rms)
    y = ew.mul(y if y.dtype == scale.dtype else ew.cast(y, scale.dtype), scale)
    return keep_dtype(y, x.dtype)


@builds(ew.Div, ReduceSum, ew.Abs, ew.Mul, ew.Sqrt, ew.Add)
def handle_lp_norm(ctx: NodeContext, xs: list) -> Tensor:
    """LpNormalization: ``x`` divided by its L1 or L2 norm along ``axis`` (0 where the
    norm is 0)."""
    x = xs[0]
    axis = [int(ctx.attr("axis", -1)) % x.ndim()]
    p = int(ctx.attr("p", 2))
    if p == 1:
        norm = autograd.reduce_sum(ew.abs(x), axis, 1)
    elif p == 2:
        norm = ew.sqrt(autograd.reduce_sum(ew.mul(x, x), axis, 1))
    else:
        raise ctx.unsupported(f"p={p} (1 or 2)")
    norm = ew.add(norm, ctx.wrap((norm.data == 0).astype(norm.dtype)))  # 0 / 0 -> 0
    return keep_dtype(ew.div(x, norm), x.dtype)


def _standardise(x: Tensor, axes: list, eps: float) -> Tensor:
    """``(x - mean) / sqrt(var + eps)`` over ``axes`` (biased variance)."""
    d = ew.sub(x, autograd.reduce_mean(x, axes, 1))
    var = autograd.reduce_mean(ew.mul(d, d), axes, 1)
    return ew.div(d, ew.sqrt(ew.add(var, Tensor.wrap(var.device.xp.asarray(eps, var.dtype), var.device))))


def _per_channel(t: Tensor, ndim: int) -> Tensor:
    """A (C,) tensor shaped (C, 1, ..., 1) to broadcast over (N, C, D1, ...)."""
    return autograd.reshape(t, (-1,) + (1,) * (ndim - 2))


@builds(ReduceMean, ew.Sub, ew.Mul, ew.Div, ew.Sqrt, ew.Add, Reshape)
def handle_instance_norm(ctx: NodeContext, xs: list) -> Tensor:
    """InstanceNormalization: each (sample, channel) standardised over its spatial
    axes, then ``scale * y + B`` per channel."""
    x, scale, bias = xs
    y = _standardise(x, list(range(2, x.ndim())), float(ctx.attr("epsilon", 1e-5)))
    return ew.add(ew.mul(y, _per_channel(scale, x.ndim())), _per_channel(bias, x.ndim()))


@builds(ReduceMean, ew.Sub, ew.Mul, ew.Div, ew.Sqrt, ew.Add, Reshape, ew.Cast, Gather)
def handle_group_norm(ctx: NodeContext, xs: list) -> Tensor:
    """GroupNormalization(num_groups, epsilon, stash_type): the channels in
    ``num_groups`` groups, each standardised over its channels and spatial axes, then
    scale and bias per channel (opset 21; per group before, repeated over its
    channels)."""
    x, scale, bias = xs
    g = int(ctx.attr("num_groups"))
    n, c = x.shape[0], x.shape[1]
    wide = x if x.dtype.itemsize >= 4 or int(ctx.attr("stash_type", 1)) != 1 else ew.cast(x, np.float32)
    y = _standardise(autograd.reshape(wide, (n, g, -1)), [2], float(ctx.attr("epsilon", 1e-5)))
    y = keep_dtype(autograd.reshape(y, tuple(x.shape)), x.dtype)
    if scale.shape[0] != c:  # opset 18: one scale and bias per group
        idx = ctx.const(np.repeat(np.arange(g), c // g))
        scale, bias = autograd.gather(scale, 0, idx), autograd.gather(bias, 0, idx)
    return ew.add(ew.mul(y, _per_channel(scale, x.ndim())), _per_channel(bias, x.ndim()))


@builds(ReduceMean, ew.Sub, ew.Mul, ew.Sqrt, ew.Add, ew.Div)
def handle_mean_variance_norm(ctx: NodeContext, xs: list) -> Tensor:
    """MeanVarianceNormalization over ``axes`` (default 0, 2, 3):
    ``(x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9)``, as ONNX's function body."""
    x = xs[0]
    axes = [int(a) % x.ndim() for a in ctx.attr("axes", [0, 2, 3])]
    m = autograd.reduce_mean(x, axes, 1)
    var = ew.sub(autograd.reduce_mean(ew.mul(x, x), axes, 1), ew.mul(m, m))
    return ew.div(ew.sub(x, m), ew.add(ew.sqrt(var), ctx.const(1e-9, x.dtype)))


@builds(ew.Mul, Pad, Slice, ew.Add, ew.Pow, ew.Div)
def handle_lrn(ctx: NodeContext, xs: list) -> Tensor:
    """LRN: ``x / (bias + alpha / size * s)^beta`` with ``s`` the sum of squares over the
    ``size`` channels around each one (zero beyond the ends)."""
    x = xs[0]
    size = int(ctx.attr("size"))
    alpha, beta, k = (float(ctx.attr(a, d)) for a, d in (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0)))
    lo, hi = (size - 1) // 2, (size - 1) - (size - 1) // 2
    r, c = x.ndim(), x.shape[1]
    pads = [0] * (2 * r)
    pads[1], pads[r + 1] = lo, hi
    sq = autograd.pad(ew.mul(x, x), "constant", pads)
    total = autograd.slice(sq, [0], [c], [1])
    for i in range(1, size):
        total = ew.add(total, autograd.slice(sq, [i], [i + c], [1]))
    base = ew.add(ew.mul(total, ctx.const(alpha / size, x.dtype)), ctx.const(k, x.dtype))
    return ew.div(x, ew.pow(base, ctx.const(beta, x.dtype)))


def convert_rms_norm(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """RMSNormalization (opset 23+), else Mul/ReduceMean/Add/Sqrt/Div (times the scale)."""
    r = xs[0].ndim
    if ctx.opset >= 23:
        scale = ins[1] if len(ins) > 1 else ctx.const(np.ones(xs[0].shape[op.axis :], xs[0].dtype))
        ctx.node("RMSNormalization", [ins[0], scale], outs, axis=int(op.axis), epsilon=float(op.eps))
        return
    x = ins[0]
    extra, attrs = ctx.axes_arg("ReduceMean", list(range(op.axis, r)), 18)
    ms = ctx.node("ReduceMean", [ctx.node("Mul", [x, x], 1)[0], *extra], 1, keepdims=1, **attrs)[0]
    eps = ctx.const(np.asarray(op.eps, xs[0].dtype))
    rms = ctx.node("Sqrt", [ctx.node("Add", [ms, eps], 1)[0]], 1)[0]
    if len(ins) == 1:
        ctx.node("Div", [x, rms], outs)
        return
    ctx.node("Mul", [ctx.node("Div", [x, rms], 1)[0], ins[1]], outs)


# ----- tables --------------------------------------------------------------------------------
EXPORT = {
    normalization.BatchNorm2d: convert_batchnorm,
    normalization.LayerNorm: convert_layer_norm,
    normalization.RMSNorm: convert_rms_norm,
}

IMPORT = {
    "BatchNormalization": handle_batchnorm,
    "LayerNormalization": handle_layer_norm,
    "RMSNormalization": handle_rms_norm,
    "LpNormalization": handle_lp_norm,
    "InstanceNormalization": handle_instance_norm,
    "GroupNormalization": handle_group_norm,
    "MeanVarianceNormalization": handle_mean_variance_norm,
    "LRN": handle_lrn,
}
