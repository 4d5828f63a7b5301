"""Dropout: ONNX export (Identity outside training, checked by onnxruntime at two batch
sizes) and import of one-node Dropout
models (the identity unless training, the mask output boolean); import of the random
generators (Bernoulli, RandomUniform/Normal[Like]) checked against numpy's draws."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from sonnx_helpers import check_export, node_model, op_types, rand, run_node_model

from singa import autograd, device, sonnx


def test_dropout_outside_training_exports_as_identity():
    model = check_export(lambda x: autograd.dropout(x, 0.3, training=False), lambda b: [rand((b, 4))])
    assert op_types(model) == ["Identity"]


def test_dropout_node_imports_as_the_identity_with_a_boolean_mask():
    x = rand((3, 4), seed=2)
    y, mask = run_node_model("Dropout", {"x": x, "c_ratio": np.float32(0.5)}, n_out=2, opset=13)
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.bool_ and mask.all()


# ----- random generators (Bernoulli, RandomUniform, RandomNormal and their Like forms) -----


def _seeded(seed: float):
    """numpy's generator as the handlers seed it (from the float seed's bits)."""
    return np.random.default_rng(int(np.float64(seed).view(np.uint64)))


def test_bernoulli_with_a_seed_is_a_uniform_draw_below_p():
    p = rand((4, 50), seed=3, low=0.0, high=1.0)
    (got,) = run_node_model("Bernoulli", {"x": p}, seed=5.0)
    want = (_seeded(5.0).random(p.shape, dtype=np.float32) < p).astype(np.float32)
    np.testing.assert_array_equal(got, want)


def test_bernoulli_frequencies_follow_p_and_dtype_attribute():
    p = np.repeat(np.array([[0.0], [0.2], [0.7], [1.0]]), 20000, axis=1)
    (got,) = run_node_model("Bernoulli", {"x": p}, seed=1.0, dtype=onnx.TensorProto.INT32)
    assert got.dtype == np.int32 and np.isin(got, [0, 1]).all()
    freq = got.mean(axis=1)
    assert freq[0] == 0.0 and freq[3] == 1.0
    np.testing.assert_allclose(freq[1:3], [0.2, 0.7], atol=0.01)


def test_seeded_node_repeats_across_prepares_and_streams_across_runs():
    x = np.zeros((3, 5), np.float32)
    model = node_model("RandomUniformLike", {"x": x}, seed=2.0)
    a1, a2 = (sonnx.prepare(model).run([x])[0] for _ in range(2))
    np.testing.assert_array_equal(a1, a2)
    rep = sonnx.prepare(model)
    first, second = rep.run([x])[0], rep.run([x])[0]
    np.testing.assert_array_equal(first, a1)
    assert not np.array_equal(first, second)
    g = _seeded(2.0)
    np.testing.assert_array_equal(first, g.random((3, 5), dtype=np.float32))
    np.testing.assert_array_equal(second, g.random((3, 5), dtype=np.float32))


def test_unseeded_draws_come_from_the_device_generator():
    x = np.zeros((4, 4), np.float32)
    rep = sonnx.prepare(node_model("RandomNormalLike", {"x": x}))
    dev = device.get_default_device()
    dev.set_rand_seed(11)
    a = rep.run([x])[0]
    dev.set_rand_seed(11)
    b = rep.run([x])[0]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, np.random.default_rng(11).standard_normal((4, 4), dtype=np.float32))


def test_random_uniform_and_normal_of_a_shape_attribute():
    (u,) = run_node_model("RandomUniform", {}, shape=[200, 100], low=-2.0, high=3.0, seed=0.0)
    assert u.shape == (200, 100) and u.dtype == np.float32
    assert u.min() >= -2.0 and u.max() < 3.0 and abs(u.mean() - 0.5) < 0.05
    (n,) = run_node_model("RandomNormal", {}, shape=[200, 100], mean=1.5, scale=0.5, seed=0.0,
                          dtype=onnx.TensorProto.DOUBLE)  # fmt: skip
    assert n.dtype == np.float64
    assert abs(n.mean() - 1.5) < 0.01 and abs(n.std() - 0.5) < 0.01


def test_random_of_an_integer_type_is_refused_with_its_name():
    x = np.zeros((2, 2), np.float32)
    with pytest.raises(sonnx.UnsupportedOperator, match="RandomUniformLike.*int64"):
        run_node_model("RandomUniformLike", {"x": x}, dtype=onnx.TensorProto.INT64)
