"""Resampling (:mod:`singa.autograd.resize`): ONNX export and import.

``upsample`` is exported as Resize (Upsample is deprecated from opset 10) with the
"asymmetric" coordinate transform, floor rounding for "nearest"; ONNX Upsample
(opsets 7-9: scales as an attribute, then as an input) imports as ``upsample``, and so
``resample`` (ONNX Resize in all its forms) exports and imports as Resize."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa import autograd
from singa.autograd import elementwise as ew
from singa.autograd import resize as rs
from singa.autograd.indexing_nd import GatherElements, gather_elements
from singa.autograd.linalg import MatMul
from singa.autograd.shaping import Reshape, Transpose
from singa.sonnx.context import ExportContext, NodeContext, batch_aware, builds
from singa.tensor import Tensor


def convert_upsample(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Resize(X, roi, scales) with mode nearest (floor) or linear, asymmetric."""
    scales = ctx.const(np.asarray(op.scales, dtype=np.float32), hint="scales")
    roi = ctx.const(np.zeros(0, np.float32), hint="roi") if ctx.opset < 13 else ""
    nearest = op.mode == "nearest"
    ctx.node(
        "Resize",
        [ins[0], roi, scales],
        outs,
        mode=op.mode,
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor" if nearest else None,
    )


@builds(rs.UpSample)
def handle_upsample(ctx: NodeContext, xs: list) -> Tensor:
    """Upsample(mode="nearest") with ``scales`` an attribute (opset 7-8) or input (9)."""
    scales = ctx.attr("scales") if len(xs) < 2 or xs[1] is None else ctx.static(xs[1])
    if scales is None:
        raise ctx.unsupported("no scales")
    return rs.upsample(xs[0], ctx.attr("mode", "nearest"), scales)


_OPTS = {
    "coordinate_transformation_mode": "half_pixel",
    "nearest_mode": "round_prefer_floor",
    "cubic_coeff_a": -0.75,
    "exclude_outside": 0,
    "antialias": 0,
    "extrapolation_value": 0.0,
}


def _per_axis(values: Any, axes: list | None, r: int, fill: Any) -> list | None:
    """Values given for ``axes`` spread over all ``r`` axes (``fill`` elsewhere)."""
    if values is None:
        return None
    values = [v.item() if hasattr(v, "item") else v for v in np.asarray(values).reshape(-1)]
    if axes is None:
        return values
    out = [fill] * r
    for a, v in zip(axes, values):
        out[a] = v
    return out


def _aspect_sizes(ctx: NodeContext, shape: tuple, sizes: list, axes: list) -> tuple[list, list]:
    """Sizes and scales under ``keep_aspect_ratio_policy`` not_larger / not_smaller."""
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
    if policy == "stretch":
        return sizes, [m / n if n else 1.0 for m, n in zip(sizes, shape)]
    ratios = [sizes[a] / shape[a] for a in axes]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    sizes = [int(scale * n + 0.5) if a in axes else n for a, n in enumerate(shape)]
    return sizes, [scale if a in axes else 1.0 for a in range(len(shape))]


def _input(xs: list, i: int, ctx: NodeContext) -> Any:
    """Input ``i`` as a host array, None when absent or empty."""
    if len(xs) <= i or xs[i] is None:
        return None
    a = ctx.static(xs[i])
    return a if a.size else None


@builds(rs.Resample)
def handle_resize(ctx: NodeContext, xs: list) -> Tensor:
    """Resize(X, roi, scales, sizes) in every form of opsets 11-19: modes nearest, linear,
    cubic; every coordinate transform, rounding, ``axes``, ``antialias``,
    ``keep_aspect_ratio_policy``, ``exclude_outside`` and ``extrapolation_value``."""
    x = xs[0]
    r = x.ndim()
    axes = ctx.attr("axes")
    axes = None if axes is None else [int(a) % r for a in axes]
    roi = _per_axis(_input(xs, 1, ctx), None, 2 * r, 0.0)
    if roi is not None and axes is not None:
        lo, hi = _per_axis(roi[: len(axes)], axes, r, 0.0), _per_axis(roi[len(axes) :], axes, r, 1.0)
        roi = lo + hi
    scales = _per_axis(_input(xs, 2, ctx), axes, r, 1.0)
    sizes = _per_axis(_input(xs, 3, ctx), axes, r, None)
    if sizes is not None:
        sizes = [n if m is None else int(m) for m, n in zip(sizes, x.shape)]
        sizes, scales = _aspect_sizes(ctx, tuple(x.shape), sizes, axes or list(range(r)))
    elif scales is None:
        raise ctx.unsupported("neither scales nor sizes given")
    opts = {k: ctx.attr(k, v) for k, v in _OPTS.items()}
    opts["exclude_outside"], opts["antialias"] = bool(opts["exclude_outside"]), bool(opts["antialias"])
    try:
        return rs.resample(x, sizes, scales, ctx.attr("mode", "nearest"), roi=roi, **opts)
    except ValueError as e:
        raise ctx.unsupported(str(e)) from e


def _resize_attrs(ctx: ExportContext, op: Any) -> dict:
    """The Resize attributes of a Resample operator (only those it needs)."""
    o = op.opts
    attrs = {
        "mode": op.mode,
        "coordinate_transformation_mode": o["coordinate_transformation_mode"],
        "nearest_mode": o["nearest_mode"] if op.mode == "nearest" else None,
        "cubic_coeff_a": o["cubic_coeff_a"] if op.mode == "cubic" else None,
        "exclude_outside": int(o["exclude_outside"]) or None,
        "extrapolation_value": o["extrapolation_value"] if op.roi else None,
    }
    if o["antialias"]:
        if ctx.opset < 18:
            raise ctx.error(op, f"antialias needs opset 18 or later (exporting opset {ctx.opset})")
        attrs["antialias"] = 1
    return attrs


@batch_aware
def convert_resample(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Resize with the operator's attributes: from opset 18 the sizes of the resized
    axes only (``axes``), so the batch stays free; before, scales when they give the
    sizes exactly (else the sizes of every axis)."""
    r = len(op.sizes)
    changed = [a for a in range(r) if xs[0].shape[a] != op.sizes[a] or op.scales[a] != 1.0]
    attrs = _resize_attrs(ctx, op)
    roi = ctx.const(np.asarray(op.roi, np.float32), hint="roi") if op.roi else ""
    if ctx.opset >= 18 and not op.roi:
        sizes = ctx.ints([op.sizes[a] for a in changed], "sizes")
        ctx.node("Resize", [ins[0], roi, "", sizes], outs, axes=changed, **attrs)
        return
    if not roi and ctx.opset < 13:
        roi = ctx.const(np.zeros(0, np.float32), hint="roi")
    scales = np.asarray(op.scales, np.float32)
    if all(int(np.floor(n * s)) == m for n, s, m in zip(xs[0].shape, scales, op.sizes)):
        ctx.node("Resize", [ins[0], roi, ctx.const(scales, hint="scales")], outs, **attrs)
        return
    if ctx.dynamic_batch and ctx.op2 is not None and ctx.op2.sizes[0] != op.sizes[0]:
        raise ctx.error(op, "sizes that scales cannot give exactly need opset 18 for a dynamic batch")
    empty = ctx.const(np.zeros(0, np.float32), hint="scales")
    ctx.node("Resize", [ins[0], roi, empty, ctx.ints(op.sizes, "sizes")], outs, **attrs)


def _base_grid(sizes: list, align_corners: bool) -> np.ndarray:
    """(prod(sizes), n + 1) normalised coordinates [x, y, (z,) 1] of every output
    position, the last spatial axis (x) varying fastest."""
    axes = []
    for n in sizes:
        k = np.arange(n, dtype=np.float64)
        axes.append(np.linspace(-1.0, 1.0, n) if align_corners else (2 * k + 1) / n - 1 if n else k)
    mesh = np.meshgrid(*axes, indexing="ij")  # depth, height, width order
    coords = [m.reshape(-1) for m in reversed(mesh)]  # x, y, z
    return np.stack(coords + [np.ones_like(coords[0])], axis=1)


@builds(MatMul, Transpose, Reshape)
def handle_affine_grid(ctx: NodeContext, xs: list) -> Tensor:
    """AffineGrid(theta, size) with ``align_corners``: the sampling grid (N, H, W, 2) or
    (N, D, H, W, 3) of the affine maps ``theta`` (N, 2, 3) or (N, 3, 4) applied to the
    normalised output coordinates (differentiable in theta)."""
    theta = xs[0]
    size = [int(v) for v in ctx.static(xs[1]).reshape(-1)]
    spatial = size[2:]
    base = _base_grid(spatial, bool(ctx.attr("align_corners", 0)))
    grid = autograd.matmul(theta, ctx.const(base.T, theta.dtype))  # (N, nd, positions)
    grid = autograd.transpose(grid, [0, 2, 1])
    return autograd.reshape(grid, (size[0], *spatial, len(spatial)))


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``x`` reflected at the borders ``lo`` and ``hi`` until inside (ONNX's rule)."""
    rng = hi - lo
    out = x.copy()
    for below in (True, False):
        sel = x < lo if below else x > hi
        dx = (lo - x) if below else (x - hi)
        n = np.floor(dx / rng) if rng else np.zeros_like(dx)
        r = dx - n * rng
        even = n % 2 == 0
        val = np.where(even, lo + r, hi - r) if below else np.where(even, hi - r, lo + r)
        out = np.where(sel, val, out)
    return out


def _taps(mode: str, x: np.ndarray) -> list:
    """(integer position, weight) of every tap of each coordinate in ``x``."""
    if mode == "nearest":
        return [(np.rint(x).astype(np.int64), np.ones_like(x))]
    x0 = np.floor(x)
    f = x - x0
    x0 = x0.astype(np.int64)
    if mode == "linear":
        return [(x0, 1 - f), (x0 + 1, f)]
    a = -0.75
    dist = [f + 1, f, 1 - f, 2 - f]
    near = lambda t: ((a + 2) * t - (a + 3)) * t * t + 1  # noqa: E731
    far = lambda t: ((a * t - 5 * a) * t + 8 * a) * t - 4 * a  # noqa: E731
    return [(x0 + k - 1, far(d) if k in (0, 3) else near(d)) for k, d in enumerate(dist)]


def _grid_taps(ctx: NodeContext, grid: np.ndarray, dims: tuple) -> list:
    """(flat index (N, Q), weight (N, Q)) of every tap of GridSample's sampling points."""
    align = bool(ctx.attr("align_corners", 0))
    mode, pad = ctx.attr("mode", "linear"), ctx.attr("padding_mode", "zeros")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    n = grid.shape[0]
    g = grid.reshape(n, -1, grid.shape[-1]).astype(np.float64)[..., ::-1]  # (N, Q, dims) slowest first
    per_dim = []
    for i, d in enumerate(dims):
        x = (g[..., i] + 1) / 2 * (d - 1) if align else ((g[..., i] + 1) * d - 1) / 2
        lo, hi = (0.0, d - 1.0) if align else (-0.5, d - 0.5)
        if mode == "nearest":
            x = np.rint(x)
        if pad == "reflection":  # (border clamps the taps, below: as onnxruntime and PyTorch,
            x = _reflect(x, lo, hi)  # which for cubic differs from clamping the coordinate)
        taps = []
        for pos, w in _taps(mode, x):
            if pad == "zeros":
                w = np.where((pos >= 0) & (pos < d), w, 0.0)
            elif pad == "border":
                pos = np.clip(pos, 0, d - 1)
            else:
                pos = _reflect(pos.astype(np.float64), lo, hi).astype(np.int64)
            taps.append((np.clip(pos, 0, d - 1), w))
        per_dim.append(taps)
    out = [(np.zeros_like(g[..., 0], dtype=np.int64), np.ones_like(g[..., 0]))]
    for i, taps in enumerate(per_dim):
        out = [(idx * dims[i] + pos, w * wt) for idx, w in out for pos, wt in taps]
    return out


@builds(GatherElements, ew.Mul, ew.Add, Reshape)
def handle_grid_sample(ctx: NodeContext, xs: list) -> Tensor:
    """GridSample(X, grid) with ``mode`` nearest / linear / cubic, ``padding_mode`` zeros /
    border / reflection and ``align_corners``, for 2-D and 3-D images: a weighted sum of
    gathered pixels, differentiable in X (the sampling positions, from the grid, are
    constants of the node: no gradient reaches the grid)."""
    x, grid = xs
    n, c, dims = x.shape[0], x.shape[1], tuple(x.shape[2:])
    if ctx.training and grid.requires_grad:
        raise ctx.unsupported("a gradient for the grid (only the image X is differentiated)")
    g = ctx.static(grid)
    flat = autograd.reshape(x, (n, c, -1))
    y = None
    for idx, w in _grid_taps(ctx, g, dims):
        picked = gather_elements(
            flat, ctx.const(np.broadcast_to(idx[:, None, :], (n, c, idx.shape[1])).copy()), 2
        )
        term = ew.mul(picked, ctx.const(w[:, None, :], x.dtype))
        y = term if y is None else ew.add(y, term)
    return autograd.reshape(y, (n, c, *g.shape[1:-1]))


EXPORT = {rs.UpSample: convert_upsample, rs.Resample: convert_resample}
IMPORT = {
    "Upsample": handle_upsample,
    "Resize": handle_resize,
    "AffineGrid": handle_affine_grid,
    "GridSample": handle_grid_sample,
}
