"""ONNX converters for the neural-network families: :mod:`singa.autograd.conv`,
:mod:`~singa.autograd.pooling`, :mod:`~singa.autograd.normalization`,
:mod:`~singa.autograd.dropout` and :mod:`~singa.autograd.reduction`."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.autograd import conv, normalization, pooling, pooling_nd, reduction
from singa.autograd.conv_transpose import ConvTranspose2d, ConvTranspose3d
from singa.autograd.dropout import Dropout
from singa.sonnx.export import ExportContext, ExportError


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
    """ConvTranspose (2-D or 3-D) with strides, pads, output_padding, dilations, group
    (negative pads, which grow the output, are written as an explicit output_shape)."""
    attrs: dict = {
        "kernel_shape": list(op.kernel_size),
        "strides": list(op.stride),
        "dilations": list(op.dilation),
        "group": int(op.groups),
        "output_padding": list(op.output_padding),
    }
    if min(op.pads) < 0:
        nd = len(op.kernel_size)
        if op.pads[:nd] != op.pads[nd:]:
            raise ctx.error(op, f"negative asymmetric pads {op.pads} cannot be written in ONNX")
        attrs["output_shape"] = list(ys[0].shape[2:])
    else:
        attrs["pads"] = list(op.pads)
    ctx.node("ConvTranspose", ins, outs, **attrs)


def _pool_attrs(ctx: ExportContext, op: Any, xs: list, ys: tuple, counts_pads: bool = False) -> dict:
    """Pooling attributes (any number of spatial axes; ``dilations`` when the operator
    has them). With ``ceil_mode``, where the last window would start beyond the input
    and its begin padding it is dropped (PyTorch's rule, ours); ONNX before opset 22
    keeps it, so then the node is written in floor mode with end paddings that reach
    exactly as far as the last windows."""
    nd = len(op.kernel_size)
    dil = tuple(getattr(op, "dilation", (1,) * nd))
    span = [(k - 1) * d + 1 for k, d in zip(op.kernel_size, dil)]
    pads = list(op.pads)
    sizes, outs = xs[0].shape[2:], ys[0].shape[2:]
    geo = list(zip(sizes, span, op.stride, outs))
    ceil = bool(op.ceil_mode) and all(
        -(-(n + pads[i] + pads[i + nd] - k) // s) + 1 == o for i, (n, k, s, o) in enumerate(geo)
    )
    if op.ceil_mode and not ceil:
        for i, (n, k, s, o) in enumerate(geo):
            ends = [
                e
                for e in range(op.kernel_size[i])
                if (n + pads[i] + e - k) // s + 1 == o and n + pads[i] + e >= k
            ]
            if counts_pads:  # extra padding would be counted in the averages
                ends = [e for e in ends if e <= pads[i + nd]]
            if not ends:
                raise ctx.error(op, f"ceil_mode output size {o} along axis {i + 2} has no ONNX equivalent")
            pads[i + nd] = min(ends, key=lambda e: abs(e - pads[i + nd]))
    attrs = {
        "kernel_shape": list(op.kernel_size),
        "strides": list(op.stride),
        "pads": pads,
        "ceil_mode": int(ceil),
    }
    if any(d != 1 for d in dil):
        attrs["dilations"] = list(dil)
    return attrs


def convert_max_pool(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """MaxPool (any number of spatial axes, dilations), with the Indices output and its
    storage_order when the operator returns indices."""
    attrs = _pool_attrs(ctx, op, xs, ys)
    if getattr(op, "return_indices", False):
        attrs["storage_order"] = int(op.storage_order)
    ctx.node("MaxPool", ins, outs, **attrs)


def convert_avg_pool(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """AveragePool (any number of spatial axes) with count_include_pad; dilations need
    opset 19 (else an ExportError). A ceil-mode output that ONNX cannot reproduce with
    counted pads is written as an explicit zero Pad followed by an AveragePool that
    counts only the (now real) padded cells."""
    if any(d != 1 for d in getattr(op, "dilation", ())) and ctx.opset < 19:
        raise ctx.error(op, f"dilated AveragePool needs opset 19 or newer (exporting opset {ctx.opset})")
    try:
        attrs = _pool_attrs(ctx, op, xs, ys, counts_pads=bool(op.count_include_pad))
    except ExportError:
        if not (op.ceil_mode and op.count_include_pad):
            raise
        nd = len(op.kernel_size)
        r = xs[0].ndim
        full = [0] * (2 * r)
        full[r - nd : r] = op.pads[:nd]
        full[2 * r - nd :] = op.pads[nd:]
        padded = ctx.node("Pad", [ins[0], ctx.ints(full, "pads"), ctx.const(np.zeros((), xs[0].dtype))], 1)[0]
        shape = list(xs[0].shape)
        for i in range(nd):
            shape[2 + i] += op.pads[i] + op.pads[i + nd]
        inner = _PadView(op, nd)
        attrs = _pool_attrs(ctx, inner, [np.empty(shape, np.int8)], ys)
        ctx.node("AveragePool", [padded], outs, count_include_pad=0, **attrs)
        return
    ctx.node("AveragePool", ins, outs, count_include_pad=int(op.count_include_pad), **attrs)


class _PadView:
    """The geometry of a pooling after its padding was applied explicitly."""

    def __init__(self, op: Any, nd: int):
        self.kernel_size = op.kernel_size
        self.stride = op.stride
        self.dilation = tuple(getattr(op, "dilation", (1,) * nd))
        self.pads = (0,) * (2 * nd)
        self.ceil_mode = op.ceil_mode


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
    ConvTranspose3d: convert_conv_transpose2d,
    pooling.MaxPooling2D: convert_max_pool,
    pooling.AveragePooling2D: convert_avg_pool,
    pooling_nd.MaxPoolingND: convert_max_pool,
    pooling_nd.AveragePoolingND: convert_avg_pool,
    pooling.GlobalAveragePool: convert_global_avg_pool,
    normalization.BatchNorm2d: convert_batchnorm,
    normalization.LayerNorm: convert_layer_norm,
    Dropout: convert_dropout,
}
