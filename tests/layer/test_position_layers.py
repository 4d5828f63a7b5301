"""PositionalEmbedding, SinusoidalPositionalEncoding and PatchEmbedding against numpy."""

import numpy as np
import pytest

from singa import autograd, layer
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor

rng = np.random.default_rng(0)


def t(a):
    a = np.asarray(a)
    return Tensor(data=a, dtype=a.dtype)


def test_positional_embedding_adds_the_first_rows():
    pe = layer.PositionalEmbedding(10, 4)
    x = rng.standard_normal((2, 6, 4)).astype(np.float32)
    y = pe(t(x)).to_numpy()
    np.testing.assert_array_equal(y, x + pe.W.to_numpy()[:6])
    assert list(pe.get_params()) == ["W"]
    assert 0.01 < pe.W.to_numpy().std() < 0.03
    with pytest.raises(ValueError, match="longer than max_len"):
        pe(t(np.zeros((1, 11, 4), np.float32)))
    with pytest.raises(ValueError, match="expected"):
        pe(t(np.zeros((1, 3, 5), np.float32)))


def test_positional_embedding_gradient_reaches_used_rows_only():
    pe = layer.PositionalEmbedding(5, 3)
    x = Tensor(data=rng.standard_normal((2, 3, 3)).astype(np.float32), requires_grad=True, stores_grad=True)
    autograd.training = True
    try:
        g = autograd.gradients(pe(x), dy=np.ones((2, 3, 3), np.float32))[pe.W].to_numpy()
    finally:
        autograd.training = False
    np.testing.assert_array_equal(g[:3], 2.0)
    np.testing.assert_array_equal(g[3:], 0.0)


def test_sinusoidal_encoding_has_no_states_and_adds_the_table():
    enc = layer.SinusoidalPositionalEncoding(4, max_len=16)
    x = rng.standard_normal((2, 5, 4))
    y = enc(t(x)).to_numpy()
    want = np.broadcast_to(autograd.sinusoidal_table(16, 4, dtype=np.float64)[:5], x.shape)
    np.testing.assert_allclose(y - x, want, rtol=1e-9, atol=1e-12)
    assert enc.get_states() == {}


def test_patch_embedding_is_a_linear_map_of_each_patch():
    pe = layer.PatchEmbedding(4, 6)
    x = rng.standard_normal((2, 3, 8, 12))
    y = pe(t(x)).to_numpy()
    assert y.shape == (2, 6, 6)
    w, b = pe.proj.W.to_numpy(), pe.proj.b.to_numpy()  # (6, 3, 4, 4)
    patch = x[1, :, 4:8, 8:12]  # row 1, column 2 -> token 1 * 3 + 2
    np.testing.assert_allclose(y[1, 5], np.tensordot(w, patch, 3) + b, rtol=1e-10)
    small = layer.PatchEmbedding(2, 3, in_channels=2)
    gradcheck(small, [rng.standard_normal((1, 2, 4, 4))])
    with pytest.raises(ValueError, match="multiples of 4"):
        pe(t(np.zeros((1, 3, 6, 8))))
