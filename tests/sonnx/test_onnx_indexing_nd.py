"""ONNX export (checked by onnxruntime) and import (checked against numpy) of
GatherElements, GatherND and ScatterND."""

from __future__ import annotations

import numpy as np
import pytest
from sonnx_helpers import check_export, handler_fn, op_types, rand, run_node_model

from singa import autograd
from singa.autograd.gradcheck import gradcheck

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


# ----- Compress, ReverseSequence, CenterCropPad, MaxUnpool (built of autograd operators) ----------
def test_compress_takes_the_true_slices():
    x = rand((3, 4))
    cond = np.array([True, False, True])
    (got,) = run_node_model("Compress", {"x": x, "c_c": cond}, axis=1)
    np.testing.assert_array_equal(got, np.compress(cond, x, axis=1))
    (flat,) = run_node_model("Compress", {"x": x, "c_c": cond})
    np.testing.assert_array_equal(flat, np.compress(cond, x))
    gradcheck(
        handler_fn("Compress", n_inputs=2, axis=0),
        [np.random.default_rng(0).standard_normal((3, 2)), cond],
        wrt=[0],
    )


def test_reverse_sequence_reverses_each_prefix():
    x = np.arange(12.0, dtype=np.float32).reshape(4, 3)  # (time, batch)
    lens = np.array([4, 1, 2])
    (got,) = run_node_model("ReverseSequence", {"x": x, "c_l": lens}, time_axis=0, batch_axis=1)
    want = x.copy()
    for b, n in enumerate(lens):
        want[:n, b] = x[:n, b][::-1]
    np.testing.assert_array_equal(got, want)


def test_center_crop_pad_crops_and_pads_around_the_centre():
    x = rand((5, 2))
    (got,) = run_node_model("CenterCropPad", {"x": x, "c_s": np.array([3, 5])})
    want = np.zeros((3, 5), np.float32)
    want[:, 1:3] = x[1:4]
    np.testing.assert_array_equal(got, want)


def test_max_unpool_inverts_max_pool_indices():
    x = rand((1, 1, 4, 4))
    pooled, idx = run_node_model("MaxPool", {"x": x}, 2, kernel_shape=[2, 2], strides=[2, 2])
    (got,) = run_node_model("MaxUnpool", {"p": pooled, "i": idx}, kernel_shape=[2, 2], strides=[2, 2])
    want = np.zeros(16, np.float32)
    want[idx.reshape(-1)] = pooled.reshape(-1)
    np.testing.assert_array_equal(got, want.reshape(1, 1, 4, 4))
    gradcheck(
        handler_fn("MaxUnpool", n_inputs=2, kernel_shape=[2, 2], strides=[2, 2]),
        [np.ones((1, 1, 2, 2)), idx],
        wrt=[0],
    )
