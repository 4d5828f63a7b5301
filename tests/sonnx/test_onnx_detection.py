"""NonMaxSuppression: selections against a hand-written greedy loop and onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from sonnx_helpers import ort_node_model, run_node_model


def _greedy(boxes, scores, limit, iou_t, score_t):
    """Greedy NMS written out box by box ([y1, x1, y2, x2] corners)."""

    def iou(a, b):
        y0, x0 = max(a[0], b[0]), max(a[1], b[1])
        y1, x1 = min(a[2], b[2]), min(a[3], b[3])
        inter = max(0.0, y1 - y0) * max(0.0, x1 - x0)
        area = lambda r: (r[2] - r[0]) * (r[3] - r[1])  # noqa: E731
        return inter / (area(a) + area(b) - inter) if inter > 0 else 0.0

    kept = []
    for i in sorted(range(len(scores)), key=lambda k: (-scores[k], k)):
        if scores[i] <= score_t or len(kept) >= limit:
            continue
        if all(iou(boxes[i], boxes[j]) <= iou_t for j in kept):
            kept.append(i)
    return kept


@pytest.mark.parametrize("center", [0, 1])
def test_nms_matches_greedy_loop_and_onnxruntime(center):
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 10, (1, 12, 2)).astype(np.float32)
    wh = rng.uniform(1, 4, (1, 12, 2)).astype(np.float32)
    boxes = np.concatenate([xy, xy + wh], -1) if not center else np.concatenate([xy, wh], -1)
    scores = rng.uniform(0, 1, (1, 2, 12)).astype(np.float32)
    ins = {
        "b": boxes,
        "s": scores,
        "c_m": np.array([5]),
        "c_i": np.array([0.3], np.float32),
        "c_t": np.array([0.2], np.float32),
    }
    (got,) = run_node_model("NonMaxSuppression", ins, center_point_box=center)
    (want,) = ort_node_model("NonMaxSuppression", ins, center_point_box=center)
    np.testing.assert_array_equal(got, want)
    if not center:
        corners = boxes[0][:, [1, 0, 3, 2]]  # x, y order given: the IoU is symmetric in the axes
        for c in range(2):
            picked = [int(r[2]) for r in got if r[1] == c]
            assert picked == _greedy(corners, scores[0, c], 5, 0.3, 0.2)
