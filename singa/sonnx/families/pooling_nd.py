"""Pooling over any number of spatial axes (:mod:`singa.autograd.pooling_nd`): ONNX
export (with the converters of :mod:`singa.sonnx.families.pooling`) and import."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa import autograd
from singa.autograd import elementwise as ew
from singa.autograd import pooling, pooling_nd
from singa.sonnx.context import NodeContext, builds, spatial_pads
from singa.sonnx.families.pooling import convert_avg_pool, convert_max_pool
from singa.tensor import Tensor

# ----- import --------------------------------------------------------------------------------


def _pool_args(ctx: NodeContext, x: Tensor) -> tuple:
    """(kernel, strides, pads, dilations, ceil_mode) of a MaxPool/AveragePool node."""
    nd = x.ndim() - 2
    if nd < 1:
        raise ctx.unsupported(f"input of rank {x.ndim()} (pooling needs (N, C, D1, ...))")
    kernel = list(ctx.attr("kernel_shape"))
    strides = list(ctx.attr("strides", [1] * nd))
    dil = list(ctx.attr("dilations", [1] * nd))
    pads = spatial_pads(ctx, x.shape[2:], kernel, strides, dil)
    return tuple(kernel), tuple(strides), tuple(pads), tuple(dil), bool(ctx.attr("ceil_mode", 0))


@builds(pooling_nd.MaxPoolNd, pooling.MaxPool2d)
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


@builds(pooling_nd.AvgPoolNd, pooling.AvgPool2d)
def handle_avg_pool(ctx: NodeContext, xs: list) -> Tensor:
    """AveragePool over any number of spatial axes (1-D, 2-D, 3-D ...) with strides,
    pads/auto_pad, dilations, ceil_mode and count_include_pad."""
    x = xs[0]
    k, s, p, d, ceil = _pool_args(ctx, x)
    cip = bool(ctx.attr("count_include_pad", 0))
    return autograd.avg_pool_nd(x, k, s, p, d, ceil, cip)


@builds(pooling_nd.AvgPoolNd, pooling.AvgPool2d, ew.Abs, ew.Pow, ew.Mul)
def handle_lp_pool(ctx: NodeContext, xs: list) -> Tensor:
    """LpPool: ``(sum over each window of |x|^p)^(1/p)`` (zero padding), the sum an
    AveragePool counting the padding times the window size."""
    x = xs[0]
    k, s, pads, d, ceil = _pool_args(ctx, x)
    p = float(ctx.attr("p", 2))
    mean = autograd.avg_pool_nd(ew.pow(ew.abs(x), ctx.const(p, x.dtype)), k, s, pads, d, ceil, True)
    total = ew.mul(mean, ctx.const(float(np.prod(k)), x.dtype))
    return ew.pow(total, ctx.const(1.0 / p, x.dtype))


# ----- tables --------------------------------------------------------------------------------
EXPORT = {
    pooling_nd.MaxPoolNd: convert_max_pool,
    pooling_nd.AvgPoolNd: convert_avg_pool,
}

IMPORT = {
    "MaxPool": handle_max_pool,
    "AveragePool": handle_avg_pool,
    "LpPool": handle_lp_pool,
}
