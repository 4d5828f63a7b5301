"""The compiled row scatter-add (singa.kernels.scatter) equals np.add.at bit for bit,
and the embedding gradient that uses it passes the float64 check."""

import numpy as np
import pytest

from singa import autograd
from singa.autograd.gradcheck import gradcheck
from singa.kernels.scatter import add_rows, add_rows_applies
from singa.tensor import Tensor


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_add_rows_equals_add_at_bitwise(dtype):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((11, 3, 4)).astype(dtype)
    idx = rng.integers(-11, 11, size=(5, 40))  # repeats and negative indices
    v = (rng.standard_normal((5, 40, 3, 4)) * 1e3).astype(dtype)
    want = a.copy()
    np.add.at(want, (idx,), v)
    assert add_rows_applies(a, (idx,), v)
    add_rows(a, idx, v)
    np.testing.assert_array_equal(a, want)


def test_out_of_range_index_changes_nothing():
    a = np.zeros((4, 2), np.float32)
    with pytest.raises(IndexError, match="index 4 is out of bounds"):
        add_rows(a, np.array([0, 4]), np.ones((2, 2), np.float32))
    assert not a.any()


def test_what_the_kernel_does_not_take():
    a = np.zeros((4, 2), np.float32)
    v = np.ones((3, 2), np.float32)
    assert not add_rows_applies(a, (np.array([0, 1, 2]), np.array([0, 1, 0])), v[:, 0])
    assert not add_rows_applies(a.T, (np.array([0, 1]),), v[:2].T)
    assert not add_rows_applies(a, (np.array([0.0, 1.0, 2.0]),), v)
    assert not add_rows_applies(a, (np.array([0, 1, 2]),), v.astype(np.float64))


def test_embedding_gradient():
    rng = np.random.default_rng(1)
    idx = Tensor(data=np.array([[0, 3, 3], [1, 0, 3]]), dtype=np.int64, requires_grad=False)
    w = rng.standard_normal((5, 4))
    gradcheck(lambda t: autograd.embedding(idx, t), [w])
    wt = Tensor(data=w, dtype=np.float64, requires_grad=True, stores_grad=True)
    y = autograd.embedding(idx, wt)
    dy = rng.standard_normal(y.shape)
    g = autograd.gradients(y, dy=dy)[wt].to_numpy()
    want = np.zeros_like(w)
    np.add.at(want, idx.to_numpy(), dy)
    np.testing.assert_array_equal(g, want)
