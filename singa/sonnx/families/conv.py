"""Convolution (:mod:`singa.autograd.conv`): ONNX export and import."""

from __future__ import annotations

from typing import Any

from singa import autograd
from singa.autograd import conv
from singa.autograd import shaping as sh
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


# ----- tables --------------------------------------------------------------------------------
EXPORT = {
    conv.Conv2d: convert_conv2d,
}

IMPORT = {
    "Conv": handle_conv,
}
