"""Models of opset 7-10 are converted to opset 11 by onnx.version_converter; one it
cannot convert raises UnsupportedOperator naming the node."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from singa.sonnx import backend


def _model(nodes, opset):
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_opset_7_model_runs_converted():
    m = _model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Softmax", ["r"], ["y"])], 7)
    rep = backend.prepare(m)
    assert rep.graph.opset == backend.MIN_IMPORT_OPSET
    assert m.opset_import[0].version == 7  # the caller's model is left as it was
    x = np.array([[1, -2, 3], [0, 5, -1]], np.float32)
    e = np.exp(np.maximum(x, 0) - np.maximum(x, 0).max(1, keepdims=True))
    np.testing.assert_allclose(rep.run([x])[0], e / e.sum(1, keepdims=True), rtol=1e-6)


def test_unconvertible_node_is_named():
    scan_body = helper.make_graph([], "body", [], [])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Scan", ["r"], ["y"], name="the_scan", body=scan_body, num_scan_inputs=1),
    ]
    m = _model(nodes, 8)
    with pytest.raises(backend.UnsupportedOperator, match=r"opset 8 .*node 'the_scan' \(Scan\)"):
        backend.prepare(m)


def test_new_opsets_are_not_converted():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], 13)
    assert backend.upgrade_opset(m) is m
    assert isinstance(backend.prepare(m).model, onnx.ModelProto)
