"""ONNX export (checked by onnxruntime) and import of TopK, import of Unique."""

from __future__ import annotations

import numpy as np
import pytest
from sonnx_helpers import check_export, op_types, ort_node_model, rand, run_node_model

from singa import autograd


@pytest.mark.parametrize("largest", [True, False])
def test_topk_exports_and_imports(largest):
    model = check_export(lambda x: autograd.topk(x, 2, 1, largest), lambda b: [rand((b, 5))])
    assert "TopK" in op_types(model)
    x = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 9.0]], np.float32)
    got = run_node_model("TopK", {"x": x, "c_k": np.array([3])}, 2, largest=int(largest))
    want = ort_node_model("TopK", {"x": x, "c_k": np.array([3])}, 2, largest=int(largest))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("sorted_", [0, 1])
def test_unique_imports_like_onnxruntime(sorted_):
    x = np.array([2.0, 1.0, 1.0, 3.0, 4.0, 3.0], np.float32)
    got = run_node_model("Unique", {"x": x}, 4, sorted=sorted_)
    want = ort_node_model("Unique", {"x": x}, 4, sorted=sorted_)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
