"""ONNX export and import of the logical family: GreaterOrEqual and LessOrEqual."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from sonnx_helpers import check_export, op_types, rand, roundtrip, unit

from singa import autograd, sonnx

PAIRS = {
    "GreaterOrEqual": (autograd.greater_equal, np.greater_equal),
    "LessOrEqual": (autograd.less_equal, np.less_equal),
}


@pytest.mark.parametrize("op_type", PAIRS)
@pytest.mark.parametrize("opset", [11, 17])
def test_or_equal_exports_and_runs_in_onnxruntime(op_type, opset):
    fn = PAIRS[op_type][0]
    model = check_export(lambda x, y: fn(x, y), lambda b: [rand((b, 3)), rand((b, 3), seed=1)], opset=opset)
    # before opset 12 the comparison is written as Not of the strict opposite
    assert (op_type in op_types(model)) == (opset >= 12)


@pytest.mark.parametrize("op_type", PAIRS)
def test_or_equal_imports_against_numpy_with_ties(op_type):
    a = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    b = np.array([3, 2, 1], np.int32)
    node = helper.make_node(op_type, ["a", "b"], ["y"])
    g = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("a", TensorProto.INT32, [2, 3]),
            helper.make_tensor_value_info("b", TensorProto.INT32, [3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.BOOL, None)],
    )
    (got,) = sonnx.prepare(helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)])).run([a, b])
    np.testing.assert_array_equal(got, PAIRS[op_type][1](a, b))


pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


LOGICAL = {
    "Greater": lambda x: autograd.greater(x, 0.1),
    "Less": lambda x: autograd.less(x, autograd.neg(x)),
    "Equal": lambda x: autograd.equal(autograd.rounde(x), 0.0),
    "And": lambda x: autograd._and(autograd.greater(x, 0.0), autograd.less(x, 0.5)),
    "Or": lambda x: autograd._or(autograd.rounde(x), autograd.greater(x, 0.5)),
    "Xor": lambda x: autograd._xor(autograd.greater(x, 0.0), autograd.less(x, 0.5)),
    "Not": lambda x: autograd._not(autograd.rounde(x)),
}


@pytest.mark.parametrize("op_type", LOGICAL)
def test_logical(op_type):
    model = roundtrip(LOGICAL[op_type], unit)
    assert op_type in op_types(model)


def test_logical_on_integers_against_a_float_constant():
    model = roundtrip(lambda i: autograd.greater(i, 1.5), lambda b: [np.arange(b * 4).reshape(b, 4) % 4])
    assert "Cast" in op_types(model)
