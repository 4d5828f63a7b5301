"""Detection: ONNX NonMaxSuppression (computed when the node runs: its output is a
data-dependent list of int64 indices, without a gradient) and RoiAlign (inference-only,
computed when the node runs: bilinear samples of each region pooled by average or max,
as onnxruntime's kernel and ONNX's reference compute them).
"""

from __future__ import annotations

import numpy as np

from singa.sonnx.context import NodeContext, builds
from singa.tensor import Tensor


def corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """(n, 4) boxes as (y_min, x_min, y_max, x_max): from [y1, x1, y2, x2] in any corner
    order (``center_point_box`` 0) or [x_center, y_center, width, height] (1)."""
    b = boxes.astype(np.float64)
    if center_point_box:
        xc, yc, w, h = b.T
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=1)
    return np.stack([np.minimum(b[:, 0], b[:, 2]), np.minimum(b[:, 1], b[:, 3]),
                     np.maximum(b[:, 0], b[:, 2]), np.maximum(b[:, 1], b[:, 3])], axis=1)  # fmt: skip


def iou_matrix(c: np.ndarray) -> np.ndarray:
    """Intersection over union of every pair of corner boxes (0 for empty boxes)."""
    y0 = np.maximum(c[:, None, 0], c[None, :, 0])
    x0 = np.maximum(c[:, None, 1], c[None, :, 1])
    y1 = np.minimum(c[:, None, 2], c[None, :, 2])
    x1 = np.minimum(c[:, None, 3], c[None, :, 3])
    inter = np.clip(y1 - y0, 0, None) * np.clip(x1 - x0, 0, None)
    area = (c[:, 2] - c[:, 0]) * (c[:, 3] - c[:, 1])
    union = area[:, None] + area[None, :] - inter
    ok = (inter > 0) & (area[:, None] > 0) & (area[None, :] > 0) & (union > 0)
    return np.where(ok, inter / np.where(ok, union, 1.0), 0.0)


def select(
    scores: np.ndarray, iou: np.ndarray, limit: int, iou_threshold: float, score_threshold
) -> list[int]:
    """Greedy selection: the highest score first (ties: the lower index), each kept when
    its IoU with every kept box is at most ``iou_threshold``; at most ``limit``."""
    order = np.argsort(-scores.astype(np.float64), kind="stable")
    if score_threshold is not None:
        order = order[scores[order] > score_threshold]
    kept: list[int] = []
    for i in order:
        if len(kept) >= limit:
            break
        if not kept or not (iou[i, kept] > iou_threshold).any():
            kept.append(int(i))
    return kept


def _scalar(ctx: NodeContext, xs: list, i: int, default):
    if len(xs) <= i or xs[i] is None or ctx.static(xs[i]).size == 0:
        return default
    return ctx.static(xs[i]).reshape(-1)[0].item()


@builds()
def handle_non_max_suppression(ctx: NodeContext, xs: list) -> Tensor:
    """NonMaxSuppression(boxes, scores, max_output_boxes_per_class, iou_threshold,
    score_threshold) with ``center_point_box``: int64 rows (batch, class, box)."""
    boxes, scores = ctx.static(xs[0]), ctx.static(xs[1])
    limit = max(int(_scalar(ctx, xs, 2, 0)), 0)
    iou_t = float(_scalar(ctx, xs, 3, 0.0))
    score_t = _scalar(ctx, xs, 4, None)
    cpb = int(ctx.attr("center_point_box", 0))
    rows = []
    for b in range(boxes.shape[0]):
        iou = iou_matrix(corners(boxes[b], cpb))
        for c in range(scores.shape[1]):
            rows += [(b, c, i) for i in select(scores[b, c], iou, limit, iou_t, score_t)]
    return ctx.const(np.asarray(rows, dtype=np.int64).reshape(-1, 3))


def _axis_samples(start: float, size: float, pooled: int, grid: int, limit: int):
    """Bilinear sampling along one axis of a region: for the ``pooled * grid`` sample
    points, the low and high indices, their weights and whether the point lies inside
    [-1, limit] (outside points contribute 0)."""
    bin_size = size / pooled
    k = np.arange(pooled * grid)
    pos = start + (k // grid) * bin_size + (k % grid + 0.5) * bin_size / grid
    inside = (pos >= -1.0) & (pos <= limit)
    pos = np.maximum(pos, 0.0)
    low = np.floor(pos).astype(np.int64)
    edge = low >= limit - 1
    low = np.where(edge, limit - 1, low)
    high = np.where(edge, limit - 1, low + 1)
    frac = np.where(edge, 0.0, pos - low)
    return low, high, (1.0 - frac) * inside, frac * inside


def _grid(sampling_ratio: int, size: float, pooled: int) -> int:
    return sampling_ratio if sampling_ratio > 0 else int(np.ceil(size / pooled))


def roi_align_one(
    feat: np.ndarray, box: np.ndarray, out_hw: tuple, sampling_ratio: int, mode: str, half: bool
):
    """One region of ``feat`` (C, H, W), box ``[x1, y1, x2, y2]`` already scaled:
    (C, out_h, out_w) pooled samples."""
    (oh, ow), (_, h, w) = out_hw, feat.shape
    x0, y0, x1, y1 = box - (0.5 if half else 0.0)
    rw, rh = x1 - x0, y1 - y0
    if not half:  # malformed regions count as 1x1
        rw, rh = max(rw, 1.0), max(rh, 1.0)
    gh, gw = _grid(sampling_ratio, rh, oh), _grid(sampling_ratio, rw, ow)
    if gh <= 0 or gw <= 0:
        return np.zeros((feat.shape[0], oh, ow))
    yl, yh, wyl, wyh = _axis_samples(y0, rh, oh, gh, h)
    xl, xh, wxl, wxh = _axis_samples(x0, rw, ow, gw, w)
    terms = [
        wy[:, None] * wx[None, :] * feat[:, iy[:, None], ix[None, :]]
        for iy, wy in ((yl, wyl), (yh, wyh))
        for ix, wx in ((xl, wxl), (xh, wxh))
    ]
    shape = (feat.shape[0], oh, gh, ow, gw)
    if mode == "max":
        return np.max(np.maximum.reduce(terms).reshape(shape), axis=(2, 4))
    return np.sum(terms, axis=0).reshape(shape).sum(axis=(2, 4)) / (gh * gw)


@builds()
def handle_roi_align(ctx: NodeContext, xs: list) -> Tensor:
    """RoiAlign(X, rois, batch_indices) with ``mode`` avg or max, ``output_height``,
    ``output_width``, ``sampling_ratio`` (0: adaptive), ``spatial_scale`` and
    ``coordinate_transformation_mode`` (half_pixel, the default from opset 16, or
    output_half_pixel, opset 10's behaviour)."""
    if ctx.training and xs[0].requires_grad:
        raise ctx.unsupported("RoiAlign is inference-only (no gradient): run the model in eval mode")
    feat, rois, idx = ctx.static(xs[0]), ctx.static(xs[1]), ctx.static(xs[2])
    mode = ctx.attr("mode", "avg")
    ctm = ctx.attr("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 16 else "output_half_pixel")
    if mode not in ("avg", "max") or ctm not in ("half_pixel", "output_half_pixel"):
        raise ctx.unsupported(f"mode {mode!r} with coordinate_transformation_mode {ctm!r}")
    if rois.ndim != 2 or rois.shape[1] != 4 or idx.shape != (rois.shape[0],):
        raise ctx.unsupported(f"rois of shape {rois.shape} with batch_indices of shape {idx.shape}")
    if idx.size and (idx.min() < 0 or idx.max() >= feat.shape[0]):
        raise ctx.unsupported(f"batch_indices outside 0..{feat.shape[0] - 1}")
    out_hw = (int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1)))
    boxes = rois.astype(np.float64) * float(ctx.attr("spatial_scale", 1.0))
    ratio = int(ctx.attr("sampling_ratio", 0))
    f64 = feat.astype(np.float64)
    ys = [
        roi_align_one(f64[int(b)], box, out_hw, ratio, mode, ctm == "half_pixel")
        for b, box in zip(idx, boxes)
    ]
    y = np.stack(ys) if ys else np.zeros((0, feat.shape[1], *out_hw))
    return ctx.const(y.astype(feat.dtype))


EXPORT: dict = {}
IMPORT = {"NonMaxSuppression": handle_non_max_suppression, "RoiAlign": handle_roi_align}
