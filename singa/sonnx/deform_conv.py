"""The import handler of ONNX's DeformConv (opset 19, 2-D), registered in the ``conv``
family: each kernel tap reads the input at its place shifted by a learned offset,
sampled bilinearly (zeros outside the image, ONNX's GridSample with aligned corners),
times the optional mask, then a grouped product with the filters.

Built of autograd operators: the four corners of every sample are gathered with
GatherElements (their integer positions are constants of the node) and weighted by
their bilinear weights, which are computed from the offsets with autograd operators, so
gradients reach the input, the offsets, the mask, the filters and the bias.
"""

from __future__ import annotations

import numpy as np

from singa import autograd
from singa.autograd import elementwise, indexing_nd, linalg
from singa.autograd import shaping as sh
from singa.sonnx.context import NodeContext, builds
from singa.tensor import Tensor


def _geometry(ctx: NodeContext, x: Tensor, w: Tensor, offset: Tensor) -> dict:
    """Kernel, strides, pads, dilations, groups and output size, checked."""
    kh, kw = (int(k) for k in ctx.attr("kernel_shape", w.shape[2:]))
    g = {
        "k": (kh, kw),
        "s": [int(v) for v in ctx.attr("strides", [1, 1])],
        "p": [int(v) for v in ctx.attr("pads", [0, 0, 0, 0])],
        "d": [int(v) for v in ctx.attr("dilations", [1, 1])],
        "group": int(ctx.attr("group", 1)),
        "og": int(ctx.attr("offset_group", 1)),
        "out": tuple(offset.shape[2:]),
    }
    n, c, h, wd = x.shape
    oh = (h + g["p"][0] + g["p"][2] - (kh - 1) * g["d"][0] - 1) // g["s"][0] + 1
    ow = (wd + g["p"][1] + g["p"][3] - (kw - 1) * g["d"][1] - 1) // g["s"][1] + 1
    ok = (
        c == w.shape[1] * g["group"]
        and c % g["og"] == 0
        and offset.shape[1] == g["og"] * kh * kw * 2
        and g["out"] == (oh, ow)
    )
    if not ok:
        raise ValueError(
            f"ONNX run: DeformConv node {ctx.name!r}: input {tuple(x.shape)}, weight {tuple(w.shape)}, "
            f"offset {tuple(offset.shape)} do not agree (group {g['group']}, offset_group {g['og']}, "
            f"output {oh}x{ow})"
        )
    return g


def _base(g: dict) -> tuple[np.ndarray, np.ndarray]:
    """The undeformed sampling rows and columns, each (kh, kw, oh, ow)."""
    (kh, kw), (oh, ow) = g["k"], g["out"]
    rows = (np.arange(kh) * g["d"][0]).reshape(kh, 1, 1, 1) + (np.arange(oh) * g["s"][0] - g["p"][0]).reshape(
        1, 1, oh, 1
    )
    cols = (np.arange(kw) * g["d"][1]).reshape(1, kw, 1, 1) + (np.arange(ow) * g["s"][1] - g["p"][1]).reshape(
        1, 1, 1, ow
    )
    return np.broadcast_to(rows, (kh, kw, oh, ow)), np.broadcast_to(cols, (kh, kw, oh, ow))


def _sampled(ctx: NodeContext, x: Tensor, offset: Tensor, g: dict) -> Tensor:
    """The bilinear samples (N, og, C/og, K, L) of ``x`` at the deformed taps."""
    n, c, h, wd = x.shape
    og, (kh, kw), (oh, ow) = g["og"], g["k"], g["out"]
    k, length = kh * kw, oh * ow
    off = autograd.reshape(offset, (n, og, kh, kw, 2, oh, ow))
    rows0, cols0 = _base(g)
    pos = np.asarray(ctx.static(offset), np.float64).reshape(n, og, kh, kw, 2, oh, ow)
    py, px = rows0 + pos[:, :, :, :, 0], cols0 + pos[:, :, :, :, 1]
    fy, fx = np.floor(py), np.floor(px)
    # the fractions as autograd values: offset + (base - floor), so gradients reach the offsets
    ty = autograd.add(autograd.slice(off, [0], [1], [4]), ctx.const((rows0 - fy)[:, :, :, :, None], x.dtype))
    tx = autograd.add(autograd.slice(off, [1], [2], [4]), ctx.const((cols0 - fx)[:, :, :, :, None], x.dtype))
    flat = autograd.reshape(x, (n, og, c // og, h * wd))
    out = None
    for dy, dx in ((0, 0), (0, 1), (1, 0), (1, 1)):
        yy, xx = fy + dy, fx + dx
        inside = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < wd)
        idx = np.where(inside, yy * wd + xx, 0).astype(np.int64).reshape(n, og, 1, k * length)
        idx = np.broadcast_to(idx, (n, og, c // og, k * length))
        vals = indexing_nd.gather_elements(flat, ctx.const(np.ascontiguousarray(idx)), 3)
        wy = ty if dy else autograd.sub(ctx.const(1.0, x.dtype), ty)
        wx = tx if dx else autograd.sub(ctx.const(1.0, x.dtype), tx)
        weight = autograd.mul(autograd.mul(wy, wx), ctx.const(inside[:, :, :, :, None], x.dtype))
        weight = autograd.reshape(weight, (n, og, 1, k * length))
        term = autograd.mul(vals, weight)
        out = term if out is None else autograd.add(out, term)
    return autograd.reshape(out, (n, og, c // og, k, length))


@builds(
    linalg.MatMul,
    indexing_nd.GatherElements,
    elementwise.Mul,
    elementwise.Add,
    elementwise.Sub,
    sh.Reshape,
    sh.Slice,
)
def handle_deform_conv(ctx: NodeContext, xs: list) -> Tensor:
    """DeformConv(X, W, offset, B, mask) on 2-D images with strides, pads, dilations,
    group and offset_group; offsets are (N, offset_group * kh * kw * 2, oh, ow) in
    (row, column) pairs, the mask (N, offset_group * kh * kw, oh, ow)."""
    x, w, offset = xs[0], xs[1], xs[2]
    b = xs[3] if len(xs) > 3 else None
    mask = xs[4] if len(xs) > 4 else None
    if x.ndim() != 4:
        raise ctx.unsupported(f"{x.ndim() - 2}-D deformable convolution (2-D is supported)")
    g = _geometry(ctx, x, w, offset)
    n, c = x.shape[:2]
    og, (kh, kw), (oh, ow), groups = g["og"], g["k"], g["out"], g["group"]
    cols = _sampled(ctx, x, offset, g)  # (N, og, C/og, K, L)
    if mask is not None:
        cols = autograd.mul(cols, autograd.reshape(mask, (n, og, 1, kh * kw, oh * ow)))
    cols = autograd.reshape(cols, (n, groups, c // groups * kh * kw, oh * ow))
    filters = autograd.reshape(w, (1, groups, w.shape[0] // groups, c // groups * kh * kw))
    y = autograd.reshape(autograd.matmul(filters, cols), (n, w.shape[0], oh, ow))
    if b is not None:
        y = autograd.add(y, autograd.reshape(b, (1, -1, 1, 1)))
    return y
