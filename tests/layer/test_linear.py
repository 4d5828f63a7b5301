"""Linear, Gemm and Embedding: lazy and eager creation, shapes, dtype/device, gradients."""

import math

import numpy as np
import pytest
from layer_helpers import param_gradcheck, t64

from singa import autograd, device, layer
from singa.tensor import Tensor


def test_linear_lazy_creation_follows_first_input():
    fc = layer.Linear(4)
    assert fc.get_params() == {} and fc.W is None
    x = t64(np.ones((3, 5)))
    y = fc(x)
    assert y.shape == (3, 4)
    p = fc.get_params()
    assert list(p) == ["W", "b"]
    assert p["W"].shape == (5, 4) and p["b"].shape == (4,)
    assert all(t.dtype == np.float64 and t.requires_grad and t.stores_grad for t in p.values())
    assert fc.in_features == 5


def test_linear_float32_and_integer_inputs_give_float32_params():
    fc = layer.Linear(2)
    fc(Tensor(data=np.ones((1, 3), np.float32)))
    assert fc.W.dtype == np.float32
    fc2 = layer.Linear(2)
    with pytest.raises(ValueError, match="matmul.*int32 and float32"):
        fc2(Tensor(data=np.ones((1, 3), np.int32), dtype=np.int32))  # no silent promotion
    assert fc2.W.dtype == np.float32


def test_linear_eager_legacy_form_creates_params_at_construction():
    fc = layer.Linear(5, 4)
    assert fc.W.shape == (5, 4) and fc.b.shape == (4,) and fc.W.dtype == np.float32
    fc_nb = layer.Linear(5, 4, False)
    assert fc_nb.b is None and list(fc_nb.get_params()) == ["W"]
    w = fc.W
    y = fc(t64(np.ones((2, 5))))  # adopts the input's float dtype, same Tensor objects
    assert y.shape == (2, 4) and fc.W is w and w.dtype == np.float64
    with pytest.raises(ValueError, match="Linear: expected input with last dim 5"):
        fc(t64(np.ones((2, 6))))


def test_linear_default_init_is_pytorch_uniform_bound():
    device.get_default_device().set_rand_seed(0)
    fc = layer.Linear(400, 300)
    bound = 1 / math.sqrt(400)
    w, b = fc.W.to_numpy(), fc.b.to_numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.02 * bound
    assert np.abs(b).max() <= bound


def test_linear_forward_matches_numpy_and_nd_inputs():
    fc = layer.Linear(3)
    x = np.random.default_rng(0).standard_normal((2, 4, 5))
    y = fc(t64(x))
    assert y.shape == (2, 4, 3)
    np.testing.assert_allclose(y.to_numpy(), x @ fc.W.to_numpy() + fc.b.to_numpy(), rtol=1e-12)


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4)])
def test_linear_gradcheck(shape):
    x = np.random.default_rng(1).standard_normal(shape)
    assert param_gradcheck(layer.Linear(3), [x]) == ["W", "b"]


def test_gemm_shapes_and_gradcheck():
    g = layer.Gemm(3)  # transB: W is (nb_kernels, in)
    x = np.random.default_rng(2).standard_normal((4, 5))
    y = g(t64(x))
    assert y.shape == (4, 3) and g.W.shape == (3, 5) and g.b.shape == (1, 3)
    np.testing.assert_allclose(y.to_numpy(), x @ g.W.to_numpy().T + g.b.to_numpy(), rtol=1e-12)
    param_gradcheck(layer.Gemm(3, alpha=0.5, beta=2.0), [x])
    g2 = layer.Gemm(2, transA=True, transB=False, bias_shape=(2,))
    y2 = g2(t64(x))
    assert y2.shape == (5, 2) and g2.W.shape == (4, 2) and g2.b.shape == (2,)
    param_gradcheck(layer.Gemm(2, transA=True, transB=False, bias=False), [x])


def test_embedding_lookup_and_gradcheck():
    emb = layer.Embedding(10, 3)
    assert emb.W.shape == (10, 3)  # sizes given: created now
    idx = np.array([[1, 2, 1], [9, 0, 1]], np.int64)
    y = emb(Tensor(data=idx, dtype=np.int64, requires_grad=False))
    assert y.shape == (2, 3, 3)
    np.testing.assert_array_equal(y.to_numpy(), emb.W.to_numpy()[idx])
    emb64 = layer.Embedding(10, 3)
    emb64.W.data = emb64.W.data.astype(np.float64)
    param_gradcheck(emb64, [idx])  # repeated rows add up
    u = layer.Embedding(50, 40, initializer="uniform").W.to_numpy()
    assert u.min() >= -1 and u.max() <= 1 and u.std() > 0.5
    with pytest.raises(ValueError, match="initializer"):
        layer.Embedding(2, 2, initializer="xavier")


def test_embedding_from_pretrained_copies_and_freezes():
    emb = layer.Embedding(4, 3)
    table = np.arange(12, dtype=np.float64).reshape(4, 3)
    w = emb.W
    emb.from_pretrained(Tensor(data=table, requires_grad=False))  # float64 cast to W's float32
    assert emb.W is w and emb.W.dtype == np.float32
    np.testing.assert_array_equal(emb.W.to_numpy(), table)
    idx = Tensor(data=np.array([[0, 3], [3, 3]], np.int64), dtype=np.int64, requires_grad=False)
    assert not emb(idx).requires_grad  # frozen: no gradient reaches W
    assert "W" in emb.get_params()  # still a parameter, as in SINGA
    emb.from_pretrained(table * 2, freeze=False)  # an array works too; unfrozen it trains
    grads = autograd.gradients(autograd.sum(emb(idx)))
    np.testing.assert_array_equal(grads[emb.W].to_numpy()[:, 0], [1, 0, 0, 3])
    with pytest.raises(ValueError, match=r"from_pretrained: W of shape \(3, 3\) does not fit"):
        emb.from_pretrained(np.zeros((3, 3)))
