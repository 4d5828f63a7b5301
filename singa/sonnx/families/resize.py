"""Resampling (:mod:`singa.autograd.resize`): ONNX export and import.

``upsample`` is exported as Resize (Upsample is deprecated from opset 10) with the
"asymmetric" coordinate transform, floor rounding for "nearest"; ONNX Upsample
(opsets 7-9: scales as an attribute, then as an input) imports as ``upsample``, and so
does Resize in that form (its other forms are for a later change)."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.autograd import resize as rs
from singa.sonnx.context import ExportContext, NodeContext, builds
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


def _resize_form(ctx: NodeContext) -> str:
    """The Resize mode when the node is what ``upsample`` computes, else unsupported."""
    mode = ctx.attr("mode", "nearest")
    wanted = {
        "coordinate_transformation_mode": ("asymmetric", "half_pixel"),
        "nearest_mode": ("floor" if mode == "nearest" else None, "round_prefer_floor"),
        "antialias": (0, 0),
        "exclude_outside": (0, 0),
        "keep_aspect_ratio_policy": ("stretch", "stretch"),
    }
    for name, (want, default) in wanted.items():
        if want is not None and ctx.attr(name, default) != want:
            raise ctx.unsupported(f"{name}={ctx.attr(name, default)!r} (only {want!r} is imported so far)")
    if mode not in ("nearest", "linear") or ctx.attr("axes") is not None:
        raise ctx.unsupported(f"mode {mode!r} or axes (only nearest and linear on every axis)")
    return mode


@builds(rs.UpSample)
def handle_resize(ctx: NodeContext, xs: list) -> Tensor:
    """Resize with ``scales``, the asymmetric transform and floor rounding for nearest
    (the form ``upsample`` exports); other forms are unsupported so far."""
    mode = _resize_form(ctx)
    scales = ctx.static(xs[2]) if len(xs) > 2 and xs[2] is not None else None
    if scales is None or scales.size == 0 or (len(xs) > 3 and xs[3] is not None):
        raise ctx.unsupported("sizes instead of scales")
    return rs.upsample(xs[0], mode, scales)


EXPORT = {rs.UpSample: convert_upsample}
IMPORT = {"Upsample": handle_upsample, "Resize": handle_resize}
