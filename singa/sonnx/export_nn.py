"""ONNX converters for the neural-network families: :mod:`singa.autograd.conv`,
:mod:`~singa.autograd.pooling`, :mod:`~singa.autograd.normalization`,
:mod:`~singa.autograd.dropout` and :mod:`~singa.autograd.reduction`."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.autograd import conv, normalization, pooling, reduction
from singa.autograd.conv_transpose import ConvTranspose2d
from singa.autograd.dropout import Dropout
from singa.sonnx.export import ExportContext


# ----- reductions ---------------------------------------------------------------------------
def _reduce(op_type: str, since: int):
    def convert(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
        extra, attrs = ctx.axes_arg(op_type, op.axes, since=since)
        ctx.node(op_type, ins + extra, outs, keepdims=int(op.keepdims), **attrs)

    convert.__name__ = f"convert_{op_type.lower()}"
    return convert


# ----- convolution and pooling -----------------------------------------------------------------
def convert_conv2d(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Conv with kernel_shape, strides, pads (top, left, bottom, right), dilations, group."""
    ctx.node(
        "Conv",
        ins,
        outs,
        kernel_shape=list(op.kernel_size),
        strides=list(op.stride),
        pads=list(op.pads),
        dilations=list(op.dilation),
        group=int(op.groups),
    )


def convert_conv_transpose2d(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """ConvTranspose with strides, pads, output_padding, dilations, group (negative
    pads, which grow the output, are written as an explicit output_shape)."""
    attrs: dict = {
        "kernel_shape": list(op.kernel_size),
        "strides": list(op.stride),
        "dilations": list(op.dilation),
        "group": int(op.groups),
        "output_padding": list(op.output_padding),
    }
    if min(op.pads) < 0:
        t, l, b, r = op.pads
        if (t, l) != (b, r):
            raise ctx.error(op, f"negative asymmetric pads {op.pads} cannot be written in ONNX")
        attrs["output_shape"] = list(ys[0].shape[2:])
    else:
        attrs["pads"] = list(op.pads)
    ctx.node("ConvTranspose", ins, outs, **attrs)


def _pool_attrs(op: Any) -> dict:
    return {
        "kernel_shape": list(op.kernel_size),
        "strides": list(op.stride),
        "pads": list(op.pads),
        "ceil_mode": int(op.ceil_mode),
    }


def convert_max_pool(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """MaxPool (2-D or 1-D)."""
    ctx.node("MaxPool", ins, outs, **_pool_attrs(op))


def convert_avg_pool(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """AveragePool (2-D or 1-D) with count_include_pad."""
    ctx.node("AveragePool", ins, outs, count_include_pad=int(op.count_include_pad), **_pool_attrs(op))


def convert_global_avg_pool(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """GlobalAveragePool."""
    ctx.node("GlobalAveragePool", ins, outs)


# ----- normalization and dropout ---------------------------------------------------------------
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


def convert_dropout(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Identity when not training (or ratio 0); else Dropout(ratio, training_mode)."""
    if not op.training or op.ratio == 0.0:
        ctx.node("Identity", ins, outs)
        return
    ratio = ctx.const(np.asarray(op.ratio, dtype=xs[0].dtype), hint="ratio")
    ctx.node("Dropout", [ins[0], ratio, ctx.const(np.asarray(True), hint="training_mode")], outs)


CONVERTERS = {
    reduction.ReduceSum: _reduce("ReduceSum", 13),
    reduction.ReduceMean: _reduce("ReduceMean", 18),
    reduction.ReduceMax: _reduce("ReduceMax", 18),
    conv.Convolution2D: convert_conv2d,
    ConvTranspose2d: convert_conv_transpose2d,
    pooling.MaxPooling2D: convert_max_pool,
    pooling.AveragePooling2D: convert_avg_pool,
    pooling.GlobalAveragePool: convert_global_avg_pool,
    normalization.BatchNorm2d: convert_batchnorm,
    normalization.LayerNorm: convert_layer_norm,
    Dropout: convert_dropout,
}
