"""ONNX export (checked by onnxruntime) and import (checked against numpy) of
GatherElements, GatherND and ScatterND."""

from __future__ import annotations

import numpy as np
import pytest
from sonnx_helpers import check_export, op_types, rand, run_node_model

from singa import autograd

IDX = np.array([[0, 2], [1, 0], [2, 2]])


def test_gather_elements_exports_and_imports():
    model = check_export(
        lambda x: autograd.gather_elements(x, np.tile(IDX[:1], (3, 1)), 1),
        lambda b: [rand((3, 3))],
        batches=(3,),
    )
    assert "GatherElements" in op_types(model)
    x = rand((3, 3))
    (got,) = run_node_model("GatherElements", {"x": x, "c_i": IDX}, axis=1)
    np.testing.assert_array_equal(got, np.take_along_axis(x, IDX, 1))


@pytest.mark.parametrize("batch_dims", [0, 1])
def test_gather_nd_exports_and_imports(batch_dims):
    idx = np.array([[1], [0], [2]]) if batch_dims else np.array([[2, 1], [0, 0]])
    model = check_export(
        lambda x: autograd.gather_nd(x, idx, batch_dims),
        lambda b: [rand((3, 3, 2))],
        batches=(3,),
        dynamic_batch=False,
    )
    assert "GatherND" in op_types(model)
    x = rand((3, 3, 2))
    (got,) = run_node_model("GatherND", {"x": x, "c_i": idx}, batch_dims=batch_dims)
    want = x[np.arange(3), idx[:, 0]] if batch_dims else x[idx[:, 0], idx[:, 1]]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatter_nd_exports_and_imports(reduction):
    idx, upd = np.array([[0, 1], [2, 0]]), np.array([5.0, -7.0], np.float32)
    model = check_export(
        lambda x: autograd.scatter_nd(x, idx, upd, reduction),
        lambda b: [rand((3, 2))],
        batches=(3,),
        dynamic_batch=False,
        opset=18,
    )
    assert "ScatterND" in op_types(model)
    x = rand((3, 2))
    (got,) = run_node_model("ScatterND", {"x": x, "c_i": idx, "c_u": upd}, reduction=reduction)
    want = x.copy()
    for (i, j), u in zip(idx, upd):
        want[i, j] = (
            u if reduction == "none" else (want[i, j] + u if reduction == "add" else max(want[i, j], u))
        )
    np.testing.assert_array_equal(got, want)
