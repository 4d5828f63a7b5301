"""Resampling (:mod:`singa.autograd.resize`): ONNX export and import.

``upsample`` is exported as Resize (Upsample is deprecated from opset 10) with the
"asymmetric" coordinate transform, floor rounding for "nearest"; ONNX Upsample
(opsets 7-9: scales as an attribute, then as an input) imports as ``upsample``, and so
``resample`` (ONNX Resize in all its forms) exports and imports as Resize."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa import autograd
from singa.autograd import resize as rs
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


EXPORT = {rs.UpSample: convert_upsample, rs.Resample: convert_resample}
IMPORT = {"Upsample": handle_upsample, "Resize": handle_resize, "AffineGrid": handle_affine_grid}
