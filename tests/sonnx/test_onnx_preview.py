"""The ``ai.onnx.preview`` domain: FlexAttention against a numpy softmax attention with
its score and probability rewrites, grouped heads, and float64 gradients through the
node and its score_mod graph."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from singa import sonnx
from singa.autograd.gradcheck import gradcheck

RNG = np.random.default_rng(0)


def _mod_graph(name, op, const):
    """A one-input graph: x -> op(x, const)."""
    c = numpy_helper.from_array(np.asarray(const, np.float64), "c")
    return helper.make_graph(
        [helper.make_node(op, ["x", "c"], ["y"])],
        name,
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, None)],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
        [c],
    )


def _model(scale=None, mods=True):
    attrs = {} if scale is None else {"scale": scale}
    if mods:
        attrs |= {
            "score_mod": _mod_graph("score", "Add", [[0.0, 0.5, -1.0]]),
            "prob_mod": _mod_graph("prob", "Mul", 2.0),
        }
    node = helper.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview", **attrs)
    vis = [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None) for n in "qkv"]
    g = helper.make_graph([node], "g", vis, [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    return helper.make_model(
        g, opset_imports=[helper.make_opsetid("ai.onnx.preview", 1), helper.make_opsetid("", 26)]
    )


def _numpy(q, k, v, scale, bias, factor):
    reps = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, reps, axis=1), np.repeat(v, reps, axis=1)
    root = np.float64(np.sqrt(np.float32(scale)))  # ONNX scales Q and K by sqrt(scale) in float32
    s = (q * root) @ (k * root).transpose(0, 1, 3, 2) + bias
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True) * factor) @ v


@pytest.mark.parametrize("scale, mods", [(None, True), (0.3, False)])
def test_flex_attention_matches_numpy_with_grouped_heads(scale, mods):
    q, k, v = (
        RNG.standard_normal((2, 4, 2, 5)),
        RNG.standard_normal((2, 2, 3, 5)),
        RNG.standard_normal((2, 2, 3, 4)),
    )
    (y,) = sonnx.prepare(_model(scale, mods)).run([q, k, v])
    bias, factor = ([[0.0, 0.5, -1.0]], 2.0) if mods else (0.0, 1.0)
    want = _numpy(q, k, v, 1 / np.sqrt(5) if scale is None else scale, np.asarray(bias), factor)
    np.testing.assert_allclose(y, want, rtol=1e-10)


def test_flex_attention_gradients_through_the_mod_graphs():
    graph = sonnx.prepare(_model()).graph
    q, k, v = (
        RNG.standard_normal((1, 2, 2, 3)),
        RNG.standard_normal((1, 1, 3, 3)),
        RNG.standard_normal((1, 1, 3, 2)),
    )
    gradcheck(lambda a, b, c: graph.run({"q": a, "k": b, "v": c}, {})[0], [q, k, v])
