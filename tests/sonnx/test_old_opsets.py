"""Models of opset 7-10 are converted to opset 11 by onnx.version_converter; one it
cannot convert raises UnsupportedOperator naming the node."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from singa import autograd, tensor
from singa.autograd.gradcheck import gradcheck
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
    stats = [numpy_helper.from_array(np.ones(3, np.float32), n) for n in "sbmv"]
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("BatchNormalization", ["r", "s", "b", "m", "v"], ["y"], name="bn", spatial=0),
    ]
    m = _model(nodes, 8)
    m.graph.initializer.extend(stats)
    with pytest.raises(backend.UnsupportedOperator, match=r"opset 8 .*node 'bn' \(BatchNormalization\)"):
        backend.prepare(m)


def _scan8_model():
    """Opset 8: running sums over axis 1 of x (batch 2), sequence_lens, reversed."""
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "e"], ["s2"]), helper.make_node("Identity", ["s2"], ["o"])],
        "body",
        [vi("s", TensorProto.FLOAT, [2]), vi("e", TensorProto.FLOAT, [2])],
        [vi("s2", TensorProto.FLOAT, [2]), vi("o", TensorProto.FLOAT, [2])],
    )
    scan = helper.make_node(
        "Scan", ["lens", "s0", "x"], ["last", "all"], body=body, num_scan_inputs=1, directions=[1]
    )
    g = helper.make_graph(
        [scan],
        "g",
        [
            vi("lens", TensorProto.INT32, [2]),
            vi("s0", TensorProto.FLOAT, [2, 2]),
            vi("x", TensorProto.FLOAT, [2, 4, 2]),
        ],
        [vi("last", TensorProto.FLOAT, None), vi("all", TensorProto.FLOAT, None)],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 8)])


def test_opset_8_scan_keeps_its_batch_axis_and_sequence_lens():
    x = np.arange(16, dtype=np.float32).reshape(2, 4, 2)
    s0 = np.ones((2, 2), np.float32)
    lens = np.array([4, 2], np.int32)
    rep = backend.prepare(_scan8_model())
    assert rep.graph.opset == backend.MIN_IMPORT_OPSET
    last, all_ = rep.run([lens, s0, x])
    for b in range(2):
        sums = s0[b] + np.cumsum(x[b, : lens[b]][::-1], axis=0)  # reversed: from step lens[b] - 1 down
        np.testing.assert_allclose(last[b], sums[-1])
        np.testing.assert_allclose(all_[b, : lens[b]], sums)
        np.testing.assert_array_equal(all_[b, lens[b] :], 0)  # padded to the longest sequence
    assert rep.graph.model.graph.node[0].domain == "singa.opset8"


def test_new_opsets_are_not_converted():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], 13)
    assert backend.upgrade_opset(m) is m
    assert isinstance(backend.prepare(m).model, onnx.ModelProto)


def test_opset_8_scan_gradients():
    m = _scan8_model()
    for v in list(m.graph.input) + list(m.graph.output):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.DOUBLE
    body = m.graph.node[0].attribute[0].g
    for v in list(body.input) + list(body.output):
        v.type.tensor_type.elem_type = TensorProto.DOUBLE
    graph = backend.prepare(m).graph
    lens = np.array([3, 1], np.int32)
    rng = np.random.default_rng(0)

    def fn(s0, x):
        last, all_ = graph.run({"lens": tensor.from_numpy(lens), "s0": s0, "x": x}, {})
        return autograd.add(
            autograd.reduce_sum(autograd.mul(last, last)), autograd.reduce_sum(autograd.mul(all_, all_))
        )

    gradcheck(fn, [rng.standard_normal((2, 2)), rng.standard_normal((2, 4, 2))])
