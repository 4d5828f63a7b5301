"""Quantised inference: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
QLinearMatMul, MatMulInteger, ConvInteger and QLinearConv (ONNX's integer and
float8 quantisation operators).

These operators are inference-only: their values are computed when the node runs,
with numpy's (or cupy's) integer arithmetic, and they have no gradient. A graph run
in training mode (a :class:`~singa.sonnx.SONNXModel` in ``train()``) with a
differentiable tensor flowing into one of them raises
:class:`~singa.sonnx.context.UnsupportedOperator` naming the node, instead of
silently cutting the gradient.

Scales and zero points are per tensor (a scalar), per axis (1-D along ``axis``)
or, from opset 21, blocked (``block_size`` entries of ``axis`` share one). Integer
results round half to even and saturate; float8 results saturate (``saturate``).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
from onnx import helper

from singa.autograd import conv
from singa.autograd import shaping as sh
from singa.sonnx.context import NodeContext, builds
from singa.sonnx.families import conv as conv_family
from singa.tensor import Tensor


def _inference_only(ctx: NodeContext, xs: list) -> None:
    """UnsupportedOperator when a gradient would be needed through the node."""
    if ctx.training and any(x is not None and x.requires_grad for x in xs):
        raise ctx.unsupported(
            "quantised operators are inference-only (no gradient): run the model in eval mode, "
            "or dequantize its weights into float initializers to fine-tune"
        )


def _host(ctx: NodeContext, xs: list, i: int) -> Any:
    return None if len(xs) <= i or xs[i] is None else ctx.static(xs[i])


def spread(value: np.ndarray, shape: tuple, axis: int, block_size: int) -> np.ndarray:
    """A scale or zero point made broadcastable to ``shape``: a scalar as it is, a 1-D
    per-axis vector along ``axis``, a blocked one repeated ``block_size`` times."""
    if value.ndim == 0 or value.size == 1 and not block_size:
        return value.reshape(())
    axis %= len(shape)
    if not block_size:
        dims = [1] * len(shape)
        dims[axis] = value.size
        return value.reshape(dims)
    value = np.repeat(value, block_size, axis=axis)
    return np.take(value, np.arange(shape[axis]), axis=axis)


def _integer_range(dt: np.dtype) -> tuple[int, int] | None:
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return int(info.min), int(info.max)
    if dt.name.startswith(("int", "uint")):  # ml_dtypes' int4, uint4, int2, uint2
        info = ml_dtypes.iinfo(dt)
        return int(info.min), int(info.max)
    return None


def quantize(
    x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, dt: np.dtype, saturate: bool = True
) -> Any:
    """``saturate(round(x / scale) + zp)`` in ``dt`` (scale and zp already spread)."""
    q = x / scale
    rng = _integer_range(dt)
    if rng is not None:
        qi = np.rint(q).astype(np.int64)
        if zp is not None:
            qi = qi + zp.astype(np.int64)
        return np.clip(qi, *rng).astype(dt)
    if dt.name.startswith("float4") and zp is not None:
        q = q + zp.astype(np.float32)
    if saturate and not dt.name.startswith("float4"):
        top = float(ml_dtypes.finfo(dt).max)
        q = np.where(np.isnan(q), q, np.clip(q, -top, top))
    return q.astype(dt)


@builds()
def handle_quantize_linear(ctx: NodeContext, xs: list) -> Tensor:
    """QuantizeLinear(x, y_scale, y_zero_point) with ``axis``, ``block_size``,
    ``output_dtype``, ``saturate`` and ``precision``."""
    _inference_only(ctx, xs)
    x, scale, zp = ctx.static(xs[0]), ctx.static(xs[1]), _host(ctx, xs, 2)
    axis, block = int(ctx.attr("axis", 1)), int(ctx.attr("block_size", 0))
    if zp is not None:
        dt = zp.dtype
    elif ctx.attr("output_dtype"):
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(int(ctx.attr("output_dtype"))))
    else:
        dt = np.dtype(np.uint8)
    if ctx.attr("precision"):
        work = np.dtype(helper.tensor_dtype_to_np_dtype(int(ctx.attr("precision"))))
        x, scale = x.astype(work), scale.astype(work)
    s = spread(scale, x.shape, axis, block)
    z = None if zp is None or dt.name.startswith("float8") else spread(zp, x.shape, axis, block)
    y = quantize(x, s, z, dt, bool(int(ctx.attr("saturate", 1))))
    return ctx.wrap(ctx.device.xp.asarray(y))


@builds()
def handle_dequantize_linear(ctx: NodeContext, xs: list) -> Tensor:
    """DequantizeLinear(x, x_scale, x_zero_point): ``(x - zp) * scale`` in the scale's
    dtype (``output_dtype`` from opset 23), per tensor, axis or block."""
    _inference_only(ctx, xs)
    x, scale, zp = ctx.static(xs[0]), ctx.static(xs[1]), _host(ctx, xs, 2)
    axis, block = int(ctx.attr("axis", 1)), int(ctx.attr("block_size", 0))
    d = x.astype(np.float32)
    if zp is not None and not x.dtype.name.startswith(("float8", "float4")):
        d = d - spread(zp.astype(np.float32), x.shape, axis, block)
    y = d * spread(scale, x.shape, axis, block)
    out = ctx.attr("output_dtype")
    dt = np.dtype(helper.tensor_dtype_to_np_dtype(int(out))) if out else scale.dtype
    return ctx.wrap(ctx.device.xp.asarray(y.astype(dt)))


@builds()
def handle_dynamic_quantize_linear(ctx: NodeContext, xs: list) -> tuple:
    """DynamicQuantizeLinear(x): uint8 y, the scale (range including 0 over 255) and
    the zero point."""
    _inference_only(ctx, xs)
    x = ctx.static(xs[0]).astype(np.float32)
    lo, hi = min(0.0, float(x.min(initial=0.0))), max(0.0, float(x.max(initial=0.0)))
    scale = np.float32((hi - lo) / 255.0)
    zp = np.uint8(np.clip(np.rint(0.0 - lo / scale), 0, 255)) if scale else np.uint8(0)
    y = quantize(x, scale if scale else np.float32(1.0), np.asarray(zp), np.dtype(np.uint8))
    return ctx.const(y), ctx.const(np.asarray(scale, np.float32)), ctx.const(np.asarray(zp, np.uint8))


def _centered(a: np.ndarray, zp: np.ndarray | None, axis: int) -> np.ndarray:
    """``a - zp`` in int64, a 1-D zero point taken along ``axis`` of ``a``."""
    a = a.astype(np.int64)
    if zp is None:
        return a
    zp = zp.astype(np.int64)
    if zp.ndim == 0 or zp.size == 1:
        return a - zp.reshape(())
    shape = [1] * a.ndim
    shape[axis] = zp.size
    return a - zp.reshape(shape)


@builds()
def handle_matmul_integer(ctx: NodeContext, xs: list) -> Tensor:
    """MatMulInteger(A, B, a_zero_point, b_zero_point): int32 ``(A - za) @ (B - zb)``
    (a per-row zero point of A along its rows, per-column of B along its columns)."""
    _inference_only(ctx, xs)
    a, b = ctx.static(xs[0]), ctx.static(xs[1])
    y = _centered(a, _host(ctx, xs, 2), -2) @ _centered(b, _host(ctx, xs, 3), -1)
    return ctx.wrap(ctx.device.xp.asarray(y.astype(np.int32)))


@builds()
def handle_qlinear_matmul(ctx: NodeContext, xs: list) -> Tensor:
    """QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp): the integer
    product rescaled by ``a_scale * b_scale / y_scale`` and requantised."""
    _inference_only(ctx, xs)
    a, sa, za, b, sb, zb, sy, zy = (ctx.static(x) for x in xs)
    acc = _centered(a, za, -2) @ _centered(b, zb, -1)
    ratio = (sa.astype(np.float32) * sb.astype(np.float32) / sy.astype(np.float32)).astype(np.float32)
    y = quantize(acc.astype(np.float32) * ratio, np.float32(1.0), zy.reshape(()), zy.dtype)
    return ctx.wrap(ctx.device.xp.asarray(y))


def _integer_conv(ctx: NodeContext, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The convolution of two int64 arrays (exact in float64 below 2**53), as int64
    (an autograd convolution on float64 copies: no gradient reaches the inputs)."""
    dev = ctx.device
    xt = Tensor.wrap(dev.xp.asarray(x.astype(np.float64)), dev)
    wt = Tensor.wrap(dev.xp.asarray(w.astype(np.float64)), dev)
    y = conv_family.handle_conv(ctx, [xt, wt])
    return np.rint(y.to_numpy()).astype(np.int64)


@builds(conv.Conv2d, sh.Unsqueeze, sh.Squeeze)
def handle_conv_integer(ctx: NodeContext, xs: list) -> Tensor:
    """ConvInteger(x, w, x_zero_point, w_zero_point): int32 convolution of the centred
    integers (Conv's attributes; a per-output-channel w zero point)."""
    _inference_only(ctx, xs)
    x, w = ctx.static(xs[0]), ctx.static(xs[1])
    y = _integer_conv(ctx, _centered(x, _host(ctx, xs, 2), 1), _centered(w, _host(ctx, xs, 3), 0))
    return ctx.wrap(ctx.device.xp.asarray(y.astype(np.int32)))


@builds(conv.Conv2d, sh.Unsqueeze, sh.Squeeze)
def handle_qlinear_conv(ctx: NodeContext, xs: list) -> Tensor:
    """QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B): the integer
    convolution plus the int32 bias, rescaled per output channel and requantised."""
    _inference_only(ctx, xs)
    x, sx, zx, w, sw, zw, sy, zy = (ctx.static(v) for v in xs[:8])
    acc = _integer_conv(ctx, _centered(x, zx, 1), _centered(w, zw, 0))
    if len(xs) > 8 and xs[8] is not None:
        acc = acc + ctx.static(xs[8]).astype(np.int64).reshape(1, -1, *([1] * (acc.ndim - 2)))
    per_channel = (sx.astype(np.float32) * sw.astype(np.float32).reshape(-1) / sy.astype(np.float32)).astype(
        np.float32
    )
    ratio = (
        per_channel.reshape(1, -1, *([1] * (acc.ndim - 2)))
        if per_channel.size > 1
        else per_channel.reshape(())
    )
    y = quantize(acc.astype(np.float32) * ratio, np.float32(1.0), zy.reshape(()), zy.dtype)
    return ctx.wrap(ctx.device.xp.asarray(y))


EXPORT: dict = {}
IMPORT = {
    "QuantizeLinear": handle_quantize_linear,
    "DequantizeLinear": handle_dequantize_linear,
    "DynamicQuantizeLinear": handle_dynamic_quantize_linear,
    "MatMulInteger": handle_matmul_integer,
    "QLinearMatMul": handle_qlinear_matmul,
    "ConvInteger": handle_conv_integer,
    "QLinearConv": handle_qlinear_conv,
}
