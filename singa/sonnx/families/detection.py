"""Detection post-processing: ONNX NonMaxSuppression (computed when the node runs:
its output is a data-dependent list of int64 indices, without a gradient).
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


EXPORT: dict = {}
IMPORT = {"NonMaxSuppression": handle_non_max_suppression}
