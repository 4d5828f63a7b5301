"""Transposed convolution (:mod:`singa.autograd.conv_transpose`): ONNX export and import."""

from __future__ import annotations

from typing import Any

from singa import autograd
from singa.autograd import conv_transpose as ct
from singa.autograd import shaping as sh
from singa.sonnx.context import ExportContext, NodeContext, builds
from singa.tensor import Tensor

# ----- export --------------------------------------------------------------------------------


def convert_conv_transpose(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
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


# ----- import --------------------------------------------------------------------------------


@builds(ct.ConvTranspose2d, ct.ConvTranspose3d, sh.Unsqueeze, sh.Squeeze)
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
        y = ct.conv_transpose2d(
            x, w, b, (1, strides[0]), (0, pads[0], 0, pads[1]), (0, outpad[0]), (1, dil[0]), group
        )
        return autograd.squeeze(y, 2)
    fn = ct.conv_transpose3d if nd == 3 else ct.conv_transpose2d
    return fn(x, w, b, tuple(strides), tuple(pads), tuple(outpad), tuple(dil), group)


# ----- tables --------------------------------------------------------------------------------
EXPORT = {
    ct.ConvTranspose2d: convert_conv_transpose,
    ct.ConvTranspose3d: convert_conv_transpose,
}

IMPORT = {
    "ConvTranspose": handle_conv_transpose,
}
