"""ONNX import handlers: matrix products, convolutions, pooling, normalization,
dropout and the classification losses."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from singa import autograd
from singa.autograd import _im2col
from singa.autograd.conv_transpose import conv_transpose2d, conv_transpose3d
from singa.sonnx.backend import NodeContext
from singa.sonnx.import_math import keep_dtype
from singa.tensor import Tensor


# ----- products ---------------------------------------------------------------------------------
def handle_matmul(ctx: NodeContext, xs: list) -> Tensor:
    """MatMul (numpy semantics, batched and 1-D operands included)."""
    return autograd.matmul(xs[0], xs[1])


def handle_gemm(ctx: NodeContext, xs: list) -> Tensor:
    """Gemm(alpha, beta, transA, transB) with an optional C."""
    c = xs[2] if len(xs) > 2 else None
    return autograd.gemm(
        xs[0],
        xs[1],
        c,
        alpha=float(ctx.attr("alpha", 1.0)),
        beta=float(ctx.attr("beta", 1.0)),
        transA=bool(ctx.attr("transA", 0)),
        transB=bool(ctx.attr("transB", 0)),
    )


# ----- geometry -----------------------------------------------------------------------------------
def _spatial_pads(ctx: NodeContext, in_sizes: tuple, kernel: list, strides: list, dilations: list) -> list:
    """ONNX ``pads`` [x1_begin, x2_begin, ..., x1_end, ...] from ``pads`` or ``auto_pad``."""
    nd = len(in_sizes)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        return list(ctx.attr("pads", [0] * (2 * nd)))
    if auto == "VALID":
        return [0] * (2 * nd)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise ctx.unsupported(f"auto_pad {auto!r}")
    begin, end = _im2col.same_pads(auto, in_sizes, kernel, strides, dilations)
    return begin + end


def _to_2d(ctx: NodeContext, x: Tensor, what: str) -> bool:
    """True for 1-D spatial inputs (N, C, L), handled as (N, C, 1, L)."""
    nd = x.ndim() - 2
    if nd not in (1, 2):
        raise ctx.unsupported(f"{nd}-D {what} (1-D and 2-D are supported)")
    return nd == 1


def handle_conv(ctx: NodeContext, xs: list) -> Tensor:
    """Conv (1-D or 2-D) with strides, pads/auto_pad, dilations and group."""
    x, w = xs[0], xs[1]
    b = xs[2] if len(xs) > 2 else None
    one_d = _to_2d(ctx, x, "convolution")
    nd = x.ndim() - 2
    kernel = list(ctx.attr("kernel_shape", w.shape[2:]))
    strides = list(ctx.attr("strides", [1] * nd))
    dil = list(ctx.attr("dilations", [1] * nd))
    pads = _spatial_pads(ctx, x.shape[2:], kernel, strides, dil)
    group = int(ctx.attr("group", 1))
    if one_d:
        x = autograd.unsqueeze(x, 2)
        w = autograd.unsqueeze(w, 2)
        y = autograd.conv2d(x, w, b, (1, strides[0]), (0, pads[0], 0, pads[1]), (1, dil[0]), group)
        return autograd.squeeze(y, 2)
    return autograd.conv2d(x, w, b, tuple(strides), tuple(pads), tuple(dil), group)


def handle_conv_transpose(ctx: NodeContext, xs: list) -> Tensor:
    """ConvTranspose (1-D, 2-D or 3-D) with strides, pads/auto_pad/output_shape,
    output_padding, dilations and group."""
    x, w = xs[0], xs[1]
    b = xs[2] if len(xs) > 2 else None
    nd = x.ndim() - 2
    if nd not in (1, 2, 3):
        raise ctx.unsupported(f"{nd}-D transposed convolution (1-D, 2-D and 3-D are supported)")
    one_d = nd == 1
    kernel = list(ctx.attr("kernel_shape", w.shape[2:]))
    strides = list(ctx.attr("strides", [1] * nd))
    dil = list(ctx.attr("dilations", [1] * nd))
    outpad = list(ctx.attr("output_padding", [0] * nd))
    group = int(ctx.attr("group", 1))
    in_sizes = x.shape[2:]
    auto = ctx.attr("auto_pad", "NOTSET")
    out_shape = ctx.attr("output_shape")
    if out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        if out_shape is None:
            out_shape = [n * s for n, s in zip(in_sizes, strides)]
        out_shape = list(out_shape)[-nd:]
        begin, end = [], []
        for n, k, s, d, op, o in zip(in_sizes, kernel, strides, dil, outpad, out_shape):
            total = s * (n - 1) + op + (k - 1) * d + 1 - o
            if auto == "SAME_UPPER":
                begin.append(total // 2)
                end.append(total - total // 2)
            else:
                begin.append(total - total // 2)
                end.append(total // 2)
        pads = begin + end
    elif auto == "VALID":
        pads = [0] * (2 * nd)
    else:
        pads = list(ctx.attr("pads", [0] * (2 * nd)))
    if one_d:
        x = autograd.unsqueeze(x, 2)
        w = autograd.unsqueeze(w, 2)
        y = conv_transpose2d(
            x, w, b, (1, strides[0]), (0, pads[0], 0, pads[1]), (0, outpad[0]), (1, dil[0]), group
        )
        return autograd.squeeze(y, 2)
    fn = conv_transpose3d if nd == 3 else conv_transpose2d
    return fn(x, w, b, tuple(strides), tuple(pads), tuple(outpad), tuple(dil), group)


# ----- pooling ----------------------------------------------------------------------------------------
def _pool_args(ctx: NodeContext, x: Tensor) -> tuple:
    """(kernel, strides, pads, dilations, ceil_mode) of a MaxPool/AveragePool node."""
    nd = x.ndim() - 2
    if nd < 1:
        raise ctx.unsupported(f"input of rank {x.ndim()} (pooling needs (N, C, D1, ...))")
    kernel = list(ctx.attr("kernel_shape"))
    strides = list(ctx.attr("strides", [1] * nd))
    dil = list(ctx.attr("dilations", [1] * nd))
    pads = _spatial_pads(ctx, x.shape[2:], kernel, strides, dil)
    return tuple(kernel), tuple(strides), tuple(pads), tuple(dil), bool(ctx.attr("ceil_mode", 0))


def handle_max_pool(ctx: NodeContext, xs: list) -> Any:
    """MaxPool over any number of spatial axes (1-D, 2-D, 3-D ...) with strides,
    pads/auto_pad, dilations and ceil_mode; the optional Indices output (flat indices
    into the whole input, row-major or, with storage_order 1, column-major spatial
    part). Integer inputs are pooled exactly (as float64) and not differentiated."""
    x = xs[0]
    order = int(ctx.attr("storage_order", 0))
    k, s, p, d, ceil = _pool_args(ctx, x)
    if x.dtype.kind != "f":  # integers: pooled as float64 (exact up to 2**53), not differentiated
        ys = handle_max_pool(ctx, [ctx.wrap(x.data.astype(np.float64))])
        if ctx.outputs > 1:
            return [ctx.wrap(ys[0].data.astype(x.dtype)), ys[1]]
        return ctx.wrap(ys.data.astype(x.dtype))
    if ctx.outputs > 1:
        y, idx = autograd.max_pool_nd(x, k, s, p, d, ceil, return_indices=True, storage_order=order)
        return [y, idx]
    return autograd.max_pool_nd(x, k, s, p, d, ceil)


def handle_avg_pool(ctx: NodeContext, xs: list) -> Tensor:
    """AveragePool over any number of spatial axes (1-D, 2-D, 3-D ...) with strides,
    pads/auto_pad, dilations, ceil_mode and count_include_pad."""
    x = xs[0]
    k, s, p, d, ceil = _pool_args(ctx, x)
    cip = bool(ctx.attr("count_include_pad", 0))
    return autograd.avg_pool_nd(x, k, s, p, d, ceil, cip)


def handle_global_avg_pool(ctx: NodeContext, xs: list) -> Tensor:
    """GlobalAveragePool: mean over every spatial axis, kept as size 1."""
    x = xs[0]
    if x.ndim() == 4:
        return autograd.global_avg_pool(x)
    return autograd.reduce_mean(x, list(range(2, x.ndim())), 1)


def handle_global_max_pool(ctx: NodeContext, xs: list) -> Tensor:
    """GlobalMaxPool: max over every spatial axis, kept as size 1."""
    x = xs[0]
    return autograd.reduce_max(x, list(range(2, x.ndim())), 1)


# ----- normalization and dropout ------------------------------------------------------------------------
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


def handle_dropout(ctx: NodeContext, xs: list) -> Any:
    """Dropout: the identity unless training (``training_mode`` input, or a SONNXModel
    in train()); the optional mask output is boolean."""
    x = xs[0]
    ratio = float(ctx.static(xs[1]).reshape(())) if len(xs) > 1 and xs[1] is not None else 0.5
    training = ctx.training
    if len(xs) > 2 and xs[2] is not None:
        training = training or bool(ctx.static(xs[2]).reshape(()))
    if not training or ratio == 0.0:
        y = x
        mask = ctx.const(np.ones(x.shape, dtype=bool))
    else:
        y = autograd.dropout(x, ratio, training=True)
        mask = ctx.wrap(y.data != 0)
    return [y, mask] if ctx.outputs > 1 else y


# ----- losses ----------------------------------------------------------------------------------------------
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


def handle_softmax_cross_entropy(ctx: NodeContext, xs: list) -> Any:
    """SoftmaxCrossEntropyLoss (scores with classes on axis 1), with the optional
    log_prob output."""
    scores, labels = xs[0], xs[1]
    weight = xs[2] if len(xs) > 2 else None
    logp = autograd.log_softmax(scores, axis=1)
    loss = _nll(ctx, logp, labels, weight)
    return [loss, logp] if ctx.outputs > 1 else loss


def handle_nll_loss(ctx: NodeContext, xs: list) -> Tensor:
    """NegativeLogLikelihoodLoss."""
    return _nll(ctx, xs[0], xs[1], xs[2] if len(xs) > 2 else None)


IMPORTERS = {
    "MatMul": handle_matmul,
    "Gemm": handle_gemm,
    "Conv": handle_conv,
    "ConvTranspose": handle_conv_transpose,
    "MaxPool": handle_max_pool,
    "AveragePool": handle_avg_pool,
    "GlobalAveragePool": handle_global_avg_pool,
    "GlobalMaxPool": handle_global_max_pool,
    "BatchNormalization": handle_batchnorm,
    "LayerNormalization": handle_layer_norm,
    "Dropout": handle_dropout,
    "SoftmaxCrossEntropyLoss": handle_softmax_cross_entropy,
    "NegativeLogLikelihoodLoss": handle_nll_loss,
}

_ = math
