"""NonMaxSuppression: selections against a hand-written greedy loop and onnxruntime;
RoiAlign against ONNX's reference evaluator, onnxruntime and a hand-written bilinear sample."""

from __future__ import annotations

import numpy as np
import pytest
from sonnx_helpers import node_model, ort_node_model, run_node_model

from singa import sonnx


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


def _roi_inputs(seed: int):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 3, 10, 12)).astype(np.float32)
    xy = rng.uniform(-3, 14, (6, 2))
    wh = rng.uniform(0.2, 9, (6, 2))
    rois = np.concatenate([xy, xy + wh], 1).astype(np.float32)  # some partly outside the map
    rois[5] = [4.0, 4.0, 4.0, 4.0]  # an empty region
    return {"x": x, "rois": rois, "idx": np.array([0, 1, 1, 0, 1, 0], np.int64)}


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ctm", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio", [0, 2])
def test_roi_align_matches_the_reference_evaluator(mode, ctm, ratio):
    from onnx.reference import ReferenceEvaluator

    ins = _roi_inputs(ratio + len(mode))
    attrs = dict(mode=mode, coordinate_transformation_mode=ctm, sampling_ratio=ratio,
                 output_height=3, output_width=4, spatial_scale=0.75)  # fmt: skip
    (got,) = run_node_model("RoiAlign", ins, **attrs)
    (want,) = ReferenceEvaluator(node_model("RoiAlign", ins, **attrs)).run(None, ins)
    assert got.dtype == np.float32 and got.shape == (6, 3, 3, 4)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    (ort,) = ort_node_model("RoiAlign", ins, **attrs)
    np.testing.assert_allclose(got, ort, rtol=1e-4, atol=1e-5)


def test_roi_align_before_opset_16_uses_output_half_pixel():
    ins = _roi_inputs(1)
    (old,) = run_node_model("RoiAlign", ins, opset=10, output_height=2, output_width=3, sampling_ratio=2)
    (new,) = run_node_model("RoiAlign", ins, output_height=2, output_width=3, sampling_ratio=2,
                            coordinate_transformation_mode="output_half_pixel")  # fmt: skip
    (default,) = run_node_model("RoiAlign", ins, output_height=2, output_width=3, sampling_ratio=2)
    np.testing.assert_array_equal(old, new)
    assert not np.allclose(default, new)


def test_roi_align_one_bin_is_the_bilinear_sample_at_its_centre():
    x = np.arange(2 * 5 * 6, dtype=np.float64).reshape(1, 2, 5, 6) ** 1.5
    rois = np.array([[1.0, 1.0, 2.0, 3.0]])  # one sample per bin: the centre (x 1.5, y 2.0)
    attrs = dict(coordinate_transformation_mode="output_half_pixel", sampling_ratio=1)
    (got,) = run_node_model("RoiAlign", {"x": x, "rois": rois, "idx": np.array([0])}, **attrs)
    f = x[0]
    want = 0.5 * f[:, 2, 1] + 0.5 * f[:, 2, 2]
    np.testing.assert_allclose(got.reshape(2), want, rtol=1e-12)


def test_roi_align_refuses_a_batch_index_outside_the_batch():
    ins = _roi_inputs(0)
    ins["idx"] = np.array([0, 1, 2, 0, 1, 0], np.int64)
    with pytest.raises(sonnx.UnsupportedOperator, match="RoiAlign.*batch_indices"):
        run_node_model("RoiAlign", ins, output_height=2, output_width=2)


def test_roi_align_in_training_is_a_clear_error():
    from singa import tensor

    ins = _roi_inputs(0)
    m = sonnx.SONNXModel(node_model("RoiAlign", {"x": ins["x"], "c_r": ins["rois"], "c_i": ins["idx"]}))
    m.train()
    with pytest.raises(sonnx.UnsupportedOperator, match="inference-only"):
        m.forward(tensor.from_numpy(ins["x"]))
    m.eval()
    (y,) = m.forward(tensor.from_numpy(ins["x"]))
    (want,) = run_node_model("RoiAlign", ins)
    np.testing.assert_array_equal(y.to_numpy(), want)
