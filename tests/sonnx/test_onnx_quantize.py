"""Quantised inference: import checked against numpy formulas and onnxruntime, and the
clear error when a gradient would be needed."""

from __future__ import annotations

import numpy as np
import pytest
from sonnx_helpers import node_model, ort_node_model, run_node_model

from singa import sonnx, tensor
from singa.sonnx.context import UnsupportedOperator


def test_quantize_per_axis_rounds_half_to_even_and_saturates():
    x = np.array([[0.5, 1.5, 2.5, 1000.0], [-0.5, -1.5, -1000.0, 3.0]], np.float32)
    scale, zp = np.array([1.0, 0.5], np.float32), np.array([10, -3], np.int8)
    (got,) = run_node_model("QuantizeLinear", {"x": x, "c_s": scale, "c_z": zp}, axis=0)
    want = np.clip(np.rint(x / scale[:, None]) + zp[:, None], -128, 127).astype(np.int8)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.int8


def test_dequantize_blocked_matches_formula():
    x = np.arange(12, dtype=np.uint8).reshape(2, 6)
    scale = np.array([[0.5, 2.0, 1.0], [1.0, 0.25, 4.0]], np.float32)
    zp = np.array([[1, 2, 3], [4, 5, 6]], np.uint8)
    ins = {"x": x, "c_s": scale, "c_z": zp}
    (got,) = run_node_model("DequantizeLinear", ins, opset=21, axis=1, block_size=2)
    want = (x.astype(np.float32) - np.repeat(zp, 2, 1)) * np.repeat(scale, 2, 1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_qlinear_matmul_and_matmul_integer_like_onnxruntime(dt):
    rng = np.random.default_rng(0)
    info = np.iinfo(dt)
    a = rng.integers(info.min, info.max, (3, 4)).astype(dt)
    b = rng.integers(info.min, info.max, (4, 2)).astype(dt)
    zp = np.array(3, dt)
    ins = {
        "a": a,
        "c_as": np.float32(0.05),
        "c_az": zp,
        "b": b,
        "c_bs": np.float32(0.02),
        "c_bz": zp,
        "c_ys": np.float32(0.1),
        "c_yz": zp,
    }
    np.testing.assert_array_equal(
        run_node_model("QLinearMatMul", ins)[0], ort_node_model("QLinearMatMul", ins)[0]
    )
    ins = {"a": a, "b": b, "c_az": zp, "c_bz": zp}
    got = run_node_model("MatMulInteger", ins)[0]
    np.testing.assert_array_equal(got, (a.astype(np.int32) - 3) @ (b.astype(np.int32) - 3))


def test_qlinear_conv_like_onnxruntime():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 255, (1, 2, 5, 5)).astype(np.uint8)
    w = rng.integers(-20, 20, (3, 2, 3, 3)).astype(np.int8)
    ins = {
        "x": x,
        "c_xs": np.float32(0.02),
        "c_xz": np.uint8(128),
        "c_w": w,
        "c_ws": np.array([0.01, 0.02, 0.03], np.float32),
        "c_wz": np.zeros(3, np.int8),
        "c_ys": np.float32(0.05),
        "c_yz": np.uint8(100),
        "c_b": np.array([10, -20, 30], np.int32),
    }
    got = run_node_model("QLinearConv", ins, pads=[1, 1, 1, 1])[0]
    want = ort_node_model("QLinearConv", ins, pads=[1, 1, 1, 1])[0]
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1  # rounding of the float rescale


def test_dynamic_quantize_covers_zero():
    x = np.array([1.0, 2.0, 4.0], np.float32)
    y, scale, zp = run_node_model("DynamicQuantizeLinear", {"x": x}, 3)
    assert zp == 0 and scale == np.float32(4.0 / 255)
    np.testing.assert_array_equal(y, np.rint(x / scale).astype(np.uint8))


def test_a_gradient_through_a_quantised_node_is_a_clear_error():
    model = node_model("DequantizeLinear", {"x": np.zeros(3, np.uint8), "c_s": np.float32(0.5)})
    m = sonnx.SONNXModel(model)
    m.train()
    with pytest.raises(UnsupportedOperator, match="inference-only"):
        m.forward(tensor.from_numpy(np.array([1, 2, 3], np.uint8)))
    m.eval()
    (y,) = m.forward(tensor.from_numpy(np.array([1, 2, 3], np.uint8)))
    np.testing.assert_array_equal(y.to_numpy(), [0.5, 1.0, 1.5])
