"""Rounding: ONNX export checked by onnxruntime at two batch sizes (and, where
the test says so, imported back with ``sonnx.prepare`` and run against our output)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from sonnx_helpers import op_types, roundtrip, session

from singa import autograd, sonnx

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def halves(b):
    """Values on a grid of halves (ties for the rounding functions) and in between."""
    return [(np.arange(b * 12, dtype=np.float32).reshape(b, 3, 4) - 17) * np.float32(0.25)]


ROUNDING = {
    "Ceil": autograd.ceil,
    "Floor": autograd.floor,
    "Round": autograd.rounde,
    "Sign": autograd.round,  # halves away from zero: written with Abs, Floor, Less, Not, Sign
}


@pytest.mark.parametrize("op_type", ROUNDING)
def test_rounding(op_type):
    model = roundtrip(ROUNDING[op_type], halves)
    assert op_type in op_types(model)


def test_round_node_imports_as_rounde_matching_onnxruntime():
    node = onnx.helper.make_node("Round", ["x"], ["y"])
    g = onnx.helper.make_graph(
        [node],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [None, 3, 4])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [None, 3, 4])],
    )
    m = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 17)])
    x = halves(2)[0]
    want = session(m).run(None, {"x": x})[0]
    np.testing.assert_array_equal(sonnx.prepare(m).run([x])[0], want)
