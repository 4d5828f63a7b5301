"""The ``ai.onnx.ml`` domain (Binarizer, ArrayFeatureExtractor, LabelEncoder): values
against numpy and a dict lookup; models naming that domain prepare; errors named."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from singa import sonnx


def _ml_model(op, inputs, out_type, **attrs):
    vis = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in inputs.items()
    ]
    node = helper.make_node(op, list(inputs), ["y"], domain="ai.onnx.ml", **attrs)
    g = helper.make_graph([node], "g", vis, [helper.make_tensor_value_info("y", out_type, None)])
    return helper.make_model(
        g, opset_imports=[helper.make_opsetid("ai.onnx.ml", 4), helper.make_opsetid("", 21)]
    )


def _run(op, inputs, out_type=TensorProto.FLOAT, **attrs):
    return sonnx.prepare(_ml_model(op, inputs, out_type, **attrs)).run(list(inputs.values()))[0]


def test_binarizer_and_array_feature_extractor():
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_array_equal(_run("Binarizer", {"x": x}, threshold=0.2), (x > 0.2).astype(np.float32))
    idx = np.array([4, 0, 4], np.int64)
    np.testing.assert_array_equal(_run("ArrayFeatureExtractor", {"x": x, "i": idx}), x[:, [4, 0, 4]])
    row = _run("ArrayFeatureExtractor", {"x": x[0], "i": idx})
    assert row.shape == (1, 3)  # a 1-D input gives one row, as onnxruntime does
    with pytest.raises(ValueError, match=r"ArrayFeatureExtractor node .*out of range for a last axis of 5"):
        _run("ArrayFeatureExtractor", {"x": x, "i": np.array([5], np.int64)})


def test_label_encoder_maps_keys_with_a_default():
    x = np.array(["a", "b", "zz", "a"], dtype=object)
    got = _run("LabelEncoder", {"x": x}, TensorProto.INT64, keys_strings=["a", "b"], values_int64s=[7, 8])
    np.testing.assert_array_equal(got, [7, 8, -1, 7])  # -1: the default_int64 default
    keys = numpy_helper.from_array(np.array([1, 2], np.int64), "k")
    values = numpy_helper.from_array(np.array(["one", "two"], dtype=object), "v")
    got = _run(
        "LabelEncoder",
        {"x": np.array([[2, 3]], np.int64)},
        TensorProto.STRING,
        keys_tensor=keys,
        values_tensor=values,
        default_tensor=numpy_helper.from_array(np.array(["?"], dtype=object), "d"),
    )
    np.testing.assert_array_equal(got, np.array([["two", "?"]], dtype=object))


def test_an_operator_of_an_unknown_domain_is_named():
    node = helper.make_node("Binarizer", ["x"], ["y"], domain="com.example", name="b1")
    vi = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    g = helper.make_graph([node], "g", [vi], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("com.example", 1), helper.make_opsetid("", 21)]
    )
    with pytest.raises(sonnx.UnsupportedOperator, match=r"com\.example\.Binarizer \(node 'b1'\)"):
        sonnx.prepare(m)
    assert "ai.onnx.ml" in sonnx.backend.supported_domains()
    assert "Binarizer" in sonnx.supported_ops("ai.onnx.ml") and "Binarizer" not in sonnx.supported_ops()


def _tree_model(aggregate):
    """Tree 0: x0 <= 1 ? leaf0 (target 0, 10) : (x1 in {2, 3} ? leaf1 (t1, 20) : leaf2 (t0, 30));
    tree 1: one leaf, leaf3 (target 1, 5)."""
    t = lambda a, dt: numpy_helper.from_array(np.array(a, dt), "t")  # noqa: E731
    attrs = dict(
        nodes_featureids=[0, 1, 0],
        nodes_splits=t([1.0, 0.0, 0.0], np.float32),
        nodes_modes=t([0, 6, 0], np.uint8),
        nodes_truenodeids=[0, 1, 3],
        nodes_falsenodeids=[1, 2, 3],
        nodes_trueleafs=[1, 1, 1],
        nodes_falseleafs=[0, 1, 1],
        membership_values=t([2.0, 3.0, np.nan], np.float32),
        leaf_targetids=[0, 1, 0, 1],
        leaf_weights=t([10.0, 20.0, 30.0, 5.0], np.float32),
        tree_roots=[0, 2],
        n_targets=2,
        aggregate_function=aggregate,
    )
    return attrs


@pytest.mark.parametrize(
    "aggregate, want", [(1, [[10, 5], [0, 25], [30, 5]]), (3, [[10, 5], [None, 20], [30, 5]])]
)
def test_tree_ensemble_walks_each_tree_to_a_leaf(aggregate, want):
    x = np.array([[0.5, 9.0], [2.0, 3.0], [2.0, 4.0]], np.float32)
    got = _run("TreeEnsemble", {"x": x}, **_tree_model(aggregate))
    lowest = np.finfo(np.float32).min  # MAX of a target no leaf reaches
    np.testing.assert_array_equal(
        got, np.array([[lowest if v is None else v for v in r] for r in want], np.float32)
    )


def _ml_handler(op, **attrs):
    from singa.sonnx import registry
    from singa.sonnx.context import NodeContext

    node = helper.make_node(op, ["x", "i"][: 2 if op == "ArrayFeatureExtractor" else 1], ["y"], **attrs)
    return lambda *ts: registry.DOMAIN_IMPORT["ai.onnx.ml"][op](
        NodeContext(node, 21, ts[0].device, True), list(ts)
    )


def test_gradients_reach_array_feature_extractor_and_binarizer_refuses_one():
    from sonnx_helpers import param

    from singa import tensor
    from singa.autograd.gradcheck import gradcheck

    idx = tensor.from_numpy(np.array([2, 0, 2], np.int64))
    afe = _ml_handler("ArrayFeatureExtractor")
    gradcheck(lambda x: afe(x, idx), [np.random.default_rng(0).standard_normal((2, 4))])
    with pytest.raises(sonnx.UnsupportedOperator, match=r"Binarizer node .*inference-only"):
        _ml_handler("Binarizer", threshold=0.0)(param(np.ones(3, np.float32)))
