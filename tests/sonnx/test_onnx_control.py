"""Control flow (If, Loop, Scan): values against Python loops, gradients through the
bodies (a SONNXModel trains through a Scan), unsupported body nodes reported at
prepare, outer-scope reads."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from singa import autograd, sonnx, tensor
from singa.sonnx.context import UnsupportedOperator


def _vi(name, elem=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _scan_cumsum_model(with_weight: bool):
    """Scan over rows: state s <- s + w * row (w an outer-scope initializer), output s."""
    body_nodes = [
        helper.make_node("Mul", ["row", "w"], ["wr"]),
        helper.make_node("Add", ["s_in", "wr"], ["s_out"]),
    ]
    body_nodes.append(helper.make_node("Identity", ["s_out"], ["y"]))
    body = helper.make_graph(body_nodes, "body", [_vi("s_in"), _vi("row")], [_vi("s_out"), _vi("y")])
    scan = helper.make_node("Scan", ["s0", "x"], ["s_last", "ys"], body=body, num_scan_inputs=1)
    w = numpy_helper.from_array(np.array([1.0, 2.0, 3.0], np.float32), "w")
    return _model([scan], [_vi("s0", shape=[3]), _vi("x", shape=[4, 3])], [_vi("s_last"), _vi("ys")], [w])


def test_scan_matches_a_python_loop_and_reads_the_outer_scope():
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    s0 = np.ones(3, np.float32)
    last, ys = sonnx.prepare(_scan_cumsum_model(True)).run([s0, x])
    want = s0 + np.cumsum(x * [1.0, 2.0, 3.0], axis=0)
    np.testing.assert_allclose(ys, want, rtol=1e-6)
    np.testing.assert_allclose(last, want[-1], rtol=1e-6)


def test_a_model_trains_through_a_scan_body():
    m = sonnx.SONNXModel(_scan_cumsum_model(True))
    w = m.params[next(k for k in m.params if k.endswith("w"))]
    m.train()
    x = tensor.from_numpy(np.ones((4, 3), np.float32))
    s0 = tensor.from_numpy(np.zeros(3, np.float32))
    last, _ = m.forward(s0, x)
    grads = autograd.gradients(autograd.reduce_sum(last))
    np.testing.assert_allclose(grads[w].to_numpy(), [4.0, 4.0, 4.0])  # d(sum_t w x_t)/dw = sum_t x_t


def test_loop_with_trip_count_condition_and_scan_output():
    # body: i, cond, v -> cond = (v < 10), v = v * 2, scan output v
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["v_in", "two"], ["v_out"]),
            helper.make_node("Less", ["v_out", "ten"], ["c_out"]),
            helper.make_node("Identity", ["v_out"], ["scan"]),
        ],
        "body",
        [_vi("i", TensorProto.INT64, []), _vi("c_in", TensorProto.BOOL, []), _vi("v_in")],
        [_vi("c_out", TensorProto.BOOL), _vi("v_out"), _vi("scan")],
        [numpy_helper.from_array(np.float32(2), "two"), numpy_helper.from_array(np.float32(10), "ten")],
    )
    loop = helper.make_node("Loop", ["M", "c", "v0"], ["v", "all"], body=body)
    inits = [numpy_helper.from_array(np.int64(6), "M"), numpy_helper.from_array(np.bool_(True), "c")]
    m = _model([loop], [_vi("v0", shape=[])], [_vi("v"), _vi("all")], inits)
    v, all_ = sonnx.prepare(m).run([np.float32(1.5)])
    assert v == 12.0  # 3, 6, 12 (stops: 12 >= 10)
    np.testing.assert_array_equal(all_, [3.0, 6.0, 12.0])


@pytest.mark.parametrize("cond", [True, False])
def test_if_runs_one_branch(cond):
    then = helper.make_graph([helper.make_node("Neg", ["x"], ["y1"])], "then", [], [_vi("y1")])
    other = helper.make_graph([helper.make_node("Abs", ["x"], ["y2"])], "else", [], [_vi("y2")])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)
    m = _model([node], [_vi("c", TensorProto.BOOL, []), _vi("x", shape=[2])], [_vi("y")])
    x = np.array([-1.0, 2.0], np.float32)
    (y,) = sonnx.prepare(m).run([np.bool_(cond), x])
    np.testing.assert_array_equal(y, -x if cond else np.abs(x))


def test_an_unsupported_node_in_a_body_is_named_at_prepare():
    then = helper.make_graph(
        [helper.make_node("FancyNewOp", ["x"], ["y1"], name="inner")], "then", [], [_vi("y1")]
    )
    other = helper.make_graph([helper.make_node("Abs", ["x"], ["y2"])], "else", [], [_vi("y2")])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="branch")
    m = _model([node], [_vi("c", TensorProto.BOOL, []), _vi("x", shape=[2])], [_vi("y")])
    with pytest.raises(UnsupportedOperator, match=r"If node 'branch'.*FancyNewOp \(node 'inner'\)"):
        sonnx.prepare(m)
