"""Matrix products and bias: ONNX export checked by onnxruntime at two batch sizes (and, where
the test says so, imported back with ``sonnx.prepare`` and run against our output)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from sonnx_helpers import check_export, op_types, param, rand

from singa import autograd, layer, sonnx
from singa.autograd.gradcheck import gradcheck
from singa.sonnx import registry
from singa.sonnx.context import NodeContext

W = param(rand((4, 3), seed=3), "W")


B = param(rand((3,), seed=4), "b")


B_COL = param(rand((5,), seed=5), "bcol")


LINALG = [
    lambda x: autograd.matmul(x, W),
    lambda x: autograd.add_bias(autograd.matmul(x, W), B, axis=0),
    lambda x: autograd.gemm(x, W, B, alpha=0.5, beta=2.0),
    lambda x: autograd.gemm(W, x, None, transA=True, transB=True),
]


@pytest.mark.parametrize("fn", LINALG)
def test_linalg(fn):
    m = check_export(fn, lambda b: [rand((b, 4))])
    for i in m.graph.initializer:
        assert i.name in {"W", "b"}


def test_batched_matmul_and_add_bias_columns():
    check_export(lambda x: autograd.matmul(x, autograd.transpose(x, (0, 2, 1))), lambda b: [rand((b, 3, 4))])
    check_export(
        lambda x: autograd.add_bias(x, B_COL, axis=1),
        lambda b: [rand((5, 2))],
        batches=(5,),
        dynamic_batch=False,
    )


def test_matmul_then_add_bias_is_one_gemm_where_it_can_be():
    """layer.Linear's matmul + add_bias is one Gemm (one layer for last_layers, as
    PyTorch's nn.Linear); not when the product is used elsewhere, is 3-D, or the bias
    is added along columns."""
    fused = check_export(
        lambda x: autograd.add_bias(autograd.matmul(x, W), B, axis=0), lambda b: [rand((b, 4))]
    )
    assert op_types(fused) == ["Gemm"]
    assert list(fused.graph.node[0].input) == ["input", "W", "b"]
    assert op_types(check_export(layer.Linear(3), lambda b: [rand((b, 4))])) == ["Gemm"]

    def twice(x):
        h = autograd.matmul(x, W)
        return autograd.add(autograd.add_bias(h, B, axis=0), h)

    assert op_types(check_export(twice, lambda b: [rand((b, 4))]))[:2] == ["MatMul", "Add"]
    assert op_types(check_export(layer.Linear(3), lambda b: [rand((b, 2, 4))])) == ["MatMul", "Add"]
    w_col = param(rand((4, 5), seed=6))
    cols = check_export(
        lambda x: autograd.add_bias(autograd.matmul(x, w_col), B_COL, axis=1),
        lambda b: [rand((5, 4))],
        batches=(5,),
        dynamic_batch=False,
    )
    assert "Gemm" not in op_types(cols)


# ----- LinearAttention (import, opset 27) -------------------------------------------------------


def _linear_attention_numpy(q, k, v, state, decay, beta, hq, hkv, rule, scale):
    """The recurrence written out head by head and token by token."""
    b, t, _ = q.shape
    dk, dv = q.shape[2] // hq, v.shape[2] // hkv
    state = state.copy()
    out = np.zeros((b, t, hq * dv))
    for n in range(b):
        for i in range(t):
            for h in range(hkv):
                kt, vt = k[n, i, h * dk : (h + 1) * dk], v[n, i, h * dv : (h + 1) * dv]
                s = state[n, h]
                if "gated" in rule:
                    g = decay[n, i, h] if decay.shape[2] == hkv else decay[n, i, h * dk : (h + 1) * dk]
                    s = np.exp(g).reshape(-1, 1) * s
                if "delta" in rule:
                    rate = beta[n, i, h if beta.shape[2] == hkv else 0]
                    vt = rate * (vt - s.T @ kt)
                state[n, h] = s + np.outer(kt, vt)
            for h in range(hq):
                qt = q[n, i, h * dk : (h + 1) * dk]
                out[n, i, h * dv : (h + 1) * dv] = scale * qt @ state[n, h // (hq // hkv)]
    return out, state


def _linear_attention_model(slots, attrs):
    """A LinearAttention node over inputs at the positions of ``slots`` (None: left out)."""
    names = [f"x{i}" if a is not None else "" for i, a in enumerate(slots)]
    vis = [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None) for n in names if n]
    node = helper.make_node("LinearAttention", names, ["y", "s"], **attrs)
    outs = [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None) for n in ("y", "s")]
    g = helper.make_graph([node], "g", vis, outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 27)])


def _linear_attention_fn(slots, attrs):
    """Both outputs of the handler (weighted sums) as a function of the given inputs."""
    node = helper.make_node("LinearAttention", [f"x{i}" for i in range(len(slots))], ["y", "s"], **attrs)

    def fn(*ts):
        it = iter(ts)
        xs = [next(it) if a is not None else None for a in slots]
        y, s = registry.IMPORT["LinearAttention"](NodeContext(node, 27, ts[0].device, True), xs)
        return autograd.add(autograd.reduce_sum(autograd.mul(y, y)), autograd.reduce_sum(s))

    return fn


@pytest.mark.parametrize(
    "rule, hq, hkv, decay_per_key, beta_shared",
    [
        ("linear", 2, 2, False, False),
        ("gated", 2, 1, True, False),
        ("delta", 2, 2, False, True),
        ("gated_delta", 4, 2, False, False),
    ],
)
def test_linear_attention_matches_the_recurrence_and_gradients(rule, hq, hkv, decay_per_key, beta_shared):
    rng = np.random.default_rng(hq + hkv)
    b, t, dk, dv = 2, 3, 2, 3
    q, k = rng.standard_normal((b, t, hq * dk)), rng.standard_normal((b, t, hkv * dk)) * 0.5
    v, past = rng.standard_normal((b, t, hkv * dv)), rng.standard_normal((b, hkv, dk, dv))
    decay = -rng.uniform(0.1, 1.0, (b, t, hkv * dk if decay_per_key else hkv))
    beta = rng.uniform(0.2, 0.9, (b, t, 1 if beta_shared else hkv))
    slots = [q, k, v, past, decay if "gated" in rule else None, beta if "delta" in rule else None]
    while slots[-1] is None:
        slots.pop()
    attrs = {"q_num_heads": hq, "kv_num_heads": hkv, "update_rule": rule}
    got = sonnx.prepare(_linear_attention_model(slots, attrs)).run([a for a in slots if a is not None])
    want = _linear_attention_numpy(q, k, v, past, decay, beta, hq, hkv, rule, 1 / np.sqrt(dk))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-10, atol=1e-12)
    gradcheck(_linear_attention_fn(slots, attrs), [a for a in slots if a is not None])


def test_linear_attention_checks_its_inputs_against_the_rule():
    x = np.zeros((1, 1, 2))
    model = _linear_attention_model([x, x, x], {"q_num_heads": 1, "kv_num_heads": 1})  # gated_delta
    with pytest.raises(ValueError, match=r"update_rule 'gated_delta' requires decay"):
        sonnx.prepare(model).run([x, x, x])
