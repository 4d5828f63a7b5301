"""Pooling (:mod:`singa.autograd.pooling`): ONNX export and import. The MaxPool and
AveragePool converters serve :mod:`singa.sonnx.families.pooling_nd` too."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.autograd import pooling
from singa.sonnx.context import ExportContext, ExportError, NodeContext, builds
from singa.tensor import Tensor

# ----- export --------------------------------------------------------------------------------


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
    """GlobalAveragePool; channels-last as Transpose, GlobalAveragePool, Transpose."""
    if not op.channels_last:
        ctx.node("GlobalAveragePool", ins, outs)
        return
    r = xs[0].ndim
    t = ctx.node("Transpose", ins, 1, perm=[0, r - 1, *range(1, r - 1)])[0]
    y = ctx.node("GlobalAveragePool", [t], 1)[0]
    ctx.node("Transpose", [y], outs, perm=[0, *range(2, r), 1])


# ----- import --------------------------------------------------------------------------------


@builds(pooling.GlobalAvgPool)
def handle_global_avg_pool(ctx: NodeContext, xs: list) -> Tensor:
    """GlobalAveragePool: mean over every spatial axis, kept as size 1."""
    return pooling.globalaveragepool(xs[0])


# ----- tables --------------------------------------------------------------------------------
EXPORT = {
    pooling.MaxPool2d: convert_max_pool,
    pooling.AvgPool2d: convert_avg_pool,
    pooling.GlobalAvgPool: convert_global_avg_pool,
}

IMPORT = {
    "GlobalAveragePool": handle_global_avg_pool,
}
