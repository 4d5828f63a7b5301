"""Elementwise arithmetic: ONNX export checked by onnxruntime at two batch sizes (and, where
the test says so, imported back with ``sonnx.prepare`` and run against our output)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from sonnx_helpers import check_export, op_types, rand, roundtrip, run_node_model, unit

from singa import autograd, tensor

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


ELEMENTWISE = [
    lambda x: autograd.add(x, 2.0),
    lambda x: autograd.sub(1.0, x),
    lambda x: autograd.mul(x, x),
    lambda x: autograd.div(x, autograd.add(autograd.abs(x), 1.0)),
    lambda x: autograd.pow(autograd.abs(x), 1.5),
    lambda x: autograd.neg(x),
    lambda x: autograd.exp(x),
    lambda x: autograd.log(autograd.add(autograd.abs(x), 0.5)),
    lambda x: autograd.sqrt(autograd.abs(x)),
    lambda x: autograd.sign(x),
    lambda x: autograd.clip(x, -0.5, 0.5),
    lambda x: autograd.clip(x, None, 0.3),
    lambda x: autograd.clip(x, -0.2),
    lambda x: autograd.maximum(x, autograd.neg(x)),
    lambda x: autograd.minimum(x, 0.1),
    lambda x: x * 3 + tensor.from_numpy(np.arange(4, dtype=np.int64)),  # mixed dtypes are cast
]


@pytest.mark.parametrize("fn", ELEMENTWISE)
def test_elementwise(fn):
    check_export(fn, lambda b: [rand((b, 4))])


SINGA_ELEMENTWISE = {
    "Reciprocal": lambda x: autograd.reciprocal(autograd.add(autograd.abs(x), 0.5)),
    "Neg": autograd.negative,
    "Exp": lambda x: autograd.exp(autograd.identity(x)),  # the exporter drops Identity nodes
}


@pytest.mark.parametrize("op_type", SINGA_ELEMENTWISE)
def test_identity_negative_reciprocal(op_type):
    assert op_type in op_types(roundtrip(SINGA_ELEMENTWISE[op_type], unit))


@pytest.mark.parametrize(
    "mode, want",
    [
        ("up", [2.0**-127, 0.125, 2.0, 2.0, 4.0, 2.0**127]),
        ("down", [2.0**-127, 0.0625, 1.0, 1.0, 4.0, 2.0**127]),
        ("nearest", [2.0**-127, 0.125, 1.0, 2.0, 4.0, 2.0**127]),
    ],
)
def test_cast_to_float8_e8m0_rounds_to_powers_of_two(mode, want):
    x = np.array([0.0, 0.124, 1.1, 1.6, 4.0, 3e38], np.float32)
    (y,) = run_node_model("Cast", {"x": x}, opset=24, to=onnx.TensorProto.FLOAT8E8M0, round_mode=mode)
    assert y.dtype.name == "float8_e8m0fnu"
    np.testing.assert_array_equal(y.astype(np.float64), want)  # 3e38 saturates at 2**127
    (back,) = run_node_model("Cast", {"y": y}, opset=24, to=onnx.TensorProto.FLOAT16)
    np.testing.assert_array_equal(back, np.array(want).astype(np.float16))
