"""Convolution (:mod:`singa.autograd.conv`): ONNX export and import."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa import autograd
from singa.autograd import activation, conv, elementwise
from singa.autograd import shaping as sh
from singa.sonnx import deform_conv
from singa.sonnx.context import ExportContext, NodeContext, builds, spatial_pads
from singa.tensor import Tensor

# ----- export --------------------------------------------------------------------------------


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


# ----- import --------------------------------------------------------------------------------


def _to_2d(ctx: NodeContext, x: Tensor, what: str) -> bool:
    """True for 1-D spatial inputs (N, C, L), handled as (N, C, 1, L)."""
    nd = x.ndim() - 2
    if nd not in (1, 2):
        raise ctx.unsupported(f"{nd}-D {what} (1-D and 2-D are supported)")
    return nd == 1


@builds(conv.Conv2d, sh.Unsqueeze, sh.Squeeze)
def handle_conv(ctx: NodeContext, xs: list) -> Tensor:
    """Conv (1-D or 2-D) with strides, pads/auto_pad, dilations and group."""
    x, w = xs[0], xs[1]
    b = xs[2] if len(xs) > 2 else None
    one_d = _to_2d(ctx, x, "convolution")
    nd = x.ndim() - 2
    kernel = list(ctx.attr("kernel_shape", w.shape[2:]))
    strides = list(ctx.attr("strides", [1] * nd))
    dil = list(ctx.attr("dilations", [1] * nd))
    pads = spatial_pads(ctx, x.shape[2:], kernel, strides, dil)
    group = int(ctx.attr("group", 1))
    if one_d:
        x = autograd.unsqueeze(x, 2)
        w = autograd.unsqueeze(w, 2)
        y = autograd.conv2d(x, w, b, (1, strides[0]), (0, pads[0], 0, pads[1]), (1, dil[0]), group)
        return autograd.squeeze(y, 2)
    return autograd.conv2d(x, w, b, tuple(strides), tuple(pads), tuple(dil), group)


_ACTIVATIONS = ("none", "silu", "swish")


@builds(conv.Conv2d, sh.Cat, sh.Unsqueeze, sh.Squeeze, sh.Slice, activation.Sigmoid, elementwise.Mul)
def handle_causal_conv_with_state(ctx: NodeContext, xs: list) -> list:
    """CausalConvWithState (opset 27): a causal depthwise 1-D convolution of input
    (batch, channels, length) with weight (channels, 1, k) and an optional bias, after the
    k - 1 positions of ``past_state`` (zeros when absent); activation ``silu``/``swish``
    (x * sigmoid(x)) or ``none``. Outputs the result and the last k - 1 positions of the
    padded input (the next call's ``past_state``)."""
    x, w = xs[0], xs[1]
    b = xs[2] if len(xs) > 2 else None
    past = xs[3] if len(xs) > 3 else None
    act = ctx.attr("activation", "none")
    if act not in _ACTIVATIONS:
        raise ctx.unsupported(f"activation {act!r} (one of {', '.join(_ACTIVATIONS)})")
    if x.ndim() != 3 or w.ndim() != 3 or w.shape[1] != 1 or w.shape[0] != x.shape[1]:
        raise ValueError(
            f"ONNX run: CausalConvWithState node {ctx.name!r}: input (batch, channels, length) and "
            f"weight (channels, 1, k) expected, got {tuple(x.shape)} and {tuple(w.shape)}"
        )
    batch, channels, _ = x.shape
    k = w.shape[2]
    if past is None:
        past = ctx.const(np.zeros((batch, channels, k - 1), x.dtype))
    padded = autograd.cat([past, x], 2) if past.shape[2] else x
    y = autograd.conv2d(autograd.unsqueeze(padded, 2), autograd.unsqueeze(w, 2), b, 1, 0, 1, channels)
    y = autograd.squeeze(y, 2)
    if act != "none":
        y = autograd.mul(y, autograd.sigmoid(y))
    n = padded.shape[2]
    return [y, autograd.slice(padded, [n - (k - 1)], [n], [2])]


# ----- tables --------------------------------------------------------------------------------
EXPORT = {
    conv.Conv2d: convert_conv2d,
}

IMPORT = {
    "CausalConvWithState": handle_causal_conv_with_state,
    "Conv": handle_conv,
    "DeformConv": deform_conv.handle_deform_conv,
}
