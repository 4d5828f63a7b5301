"""The ``ai.onnx.preview.training`` domain (Adagrad, Adam, Momentum): a first step by
hand, then several tensors and steps against ONNX's own reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from singa import sonnx

DOMAIN = "ai.onnx.preview.training"
RNG = np.random.default_rng(0)


def _model(op, n_tensors, per, **attrs):
    names = ["r", "t"] + [f"in{j}_{i}" for j in range(per) for i in range(n_tensors)]
    outs = [f"out{j}_{i}" for j in range(per - 1) for i in range(n_tensors)]
    vis = [
        helper.make_tensor_value_info(n, TensorProto.INT64 if n == "t" else TensorProto.FLOAT, None)
        for n in names
    ]
    node = helper.make_node(op, names, outs, domain=DOMAIN, **attrs)
    g = helper.make_graph(
        [node], "g", vis, [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outs]
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid(DOMAIN, 1), helper.make_opsetid("", 21)])


def test_first_momentum_step_is_plain_sgd():
    x, g, v = np.float32([1.0, -2.0]), np.float32([0.5, 0.25]), np.float32([9.0, 9.0])
    model = _model("Momentum", 1, 3, alpha=0.5, beta=0.1, mode="standard", norm_coefficient=0.0)
    x_new, v_new = sonnx.prepare(model).run([np.float32(0.1), np.int64(0), x, g, v])
    np.testing.assert_allclose(v_new, 0.5 * v + g)  # the gradient's coefficient is 1 at T = 0
    np.testing.assert_allclose(x_new, x - 0.1 * v_new)


@pytest.mark.parametrize(
    "op, per, attrs",
    [
        ("Adagrad", 3, dict(decay_factor=0.1, epsilon=1e-6, norm_coefficient=0.01)),
        (
            "Adam",
            4,
            dict(alpha=0.9, beta=0.99, epsilon=1e-6, norm_coefficient=0.01, norm_coefficient_post=0.02),
        ),
        ("Momentum", 3, dict(alpha=0.9, beta=0.5, mode="nesterov", norm_coefficient=0.01)),
    ],
)
@pytest.mark.parametrize("step", [0, 3])
def test_optimizers_match_the_reference(op, per, attrs, step):
    model = _model(op, 2, per, **attrs)
    feeds = [np.float32(0.05), np.int64(step)] + [
        RNG.uniform(0.1, 1, (3,)).astype(np.float32) for _ in range(2 * per)
    ]
    ours = sonnx.prepare(model).run(feeds)
    ref = ReferenceEvaluator(model).run(None, dict(zip([i.name for i in model.graph.input], feeds)))
    assert len(ours) == 2 * (per - 1)
    for a, b in zip(ours, ref):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-5)


def test_inputs_not_in_groups_are_named():
    model = _model("Adagrad", 1, 3)
    node = model.graph.node[0]
    del node.input[-1]
    del model.graph.input[-1]
    with pytest.raises(ValueError, match=r"Adagrad node .*4 inputs, expected 2 \+ 3 x N"):
        sonnx.prepare(model).run(
            [np.float32(0.1), np.int64(0), np.zeros(2, np.float32), np.zeros(2, np.float32)]
        )


def test_a_gradient_through_an_optimizer_step_is_refused():
    from sonnx_helpers import param

    from singa import tensor
    from singa.sonnx import registry
    from singa.sonnx.context import NodeContext

    node = helper.make_node("Adagrad", ["r", "t", "x", "g", "h"], ["x2", "h2"], domain=DOMAIN)
    x = param(np.ones(2, np.float32))
    xs = [tensor.from_numpy(np.float32(0.1)), tensor.from_numpy(np.int64(0)), x, x, x]
    with pytest.raises(sonnx.UnsupportedOperator, match=r"Adagrad node .*optimizer steps are inference-only"):
        registry.DOMAIN_IMPORT[DOMAIN]["Adagrad"](NodeContext(node, 21, x.device, True), xs)
