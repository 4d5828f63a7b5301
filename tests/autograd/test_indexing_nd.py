"""gather_elements, gather_nd, scatter_nd: forward against numpy, float64 gradients,
argument errors."""

import numpy as np
import pytest

from singa import autograd
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor


def Tensor_(data):
    a = np.asarray(data)
    return Tensor(data=a, dtype=a.dtype, requires_grad=False)


def T(a):
    return Tensor_(a)


def test_gather_elements_matches_take_along_axis_with_negative_indices():
    x = np.arange(12.0).reshape(3, 4)
    idx = np.array([[0, -1], [2, 1], [3, 3]])
    got = autograd.gather_elements(T(x), idx, axis=1).to_numpy()
    np.testing.assert_array_equal(got, np.take_along_axis(x, idx % 4, axis=1))


def test_gather_elements_gradient_accumulates_repeats():
    x = np.random.default_rng(0).standard_normal((3, 4))
    idx = np.array([[0, 0, 1], [3, 2, 3], [1, 1, 1]])
    gradcheck(lambda t: autograd.gather_elements(t, idx, 1), [x])
    gradcheck(lambda t: autograd.gather_elements(t, idx[:2, :3] % 3, 0), [x])


def test_gather_nd_with_batch_dims_matches_loops():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 4))
    idx = np.array([[[1, 2], [0, -1]], [[2, 3], [2, 0]]])
    got = autograd.gather_nd(T(x), idx, batch_dims=1).to_numpy()
    want = np.array([[x[b, i % 3, j % 4] for i, j in idx[b]] for b in range(2)])
    np.testing.assert_array_equal(got, want)
    slices = autograd.gather_nd(T(x), [[1], [0], [1]]).to_numpy()
    np.testing.assert_array_equal(slices, x[[1, 0, 1]])
    gradcheck(lambda t: autograd.gather_nd(t, idx, 1), [x])
    gradcheck(lambda t: autograd.gather_nd(t, [[1, 1], [1, 1]]), [x])


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_matches_numpy(reduction):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 3))
    idx = np.array([[1], [3], [1]]) if reduction != "none" else np.array([[1], [3]])
    upd = rng.standard_normal((len(idx), 3))
    want = x.copy()
    for i, u in zip(idx[:, 0], upd):
        want[i] = {
            "none": lambda a, b: b,
            "add": np.add,
            "mul": np.multiply,
            "max": np.maximum,
            "min": np.minimum,
        }[reduction](want[i], u)
    got = autograd.scatter_nd(T(x), idx, upd, reduction).to_numpy()
    np.testing.assert_allclose(got, want)


@pytest.mark.parametrize("reduction", ["none", "add"])
def test_scatter_nd_gradients(reduction):
    rng = np.random.default_rng(3)
    x, upd = rng.standard_normal((4, 3)), rng.standard_normal((2,))
    idx = np.array([[0, 2], [3, 1]])
    gradcheck(lambda a, u: autograd.scatter_nd(a, idx, u, reduction), [x, upd])


def test_errors_name_the_operator():
    x = T(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="gather_elements: indices in"):
        autograd.gather_elements(x, [[0, 3]], 1)
    with pytest.raises(ValueError, match="gather_nd: indices must be"):
        autograd.gather_nd(x, [[0, 1, 0]])
    with pytest.raises(ValueError, match="scatter_nd: updates must have shape"):
        autograd.scatter_nd(x, [[0]], np.zeros((1, 2)))
    with pytest.raises(ValueError, match="scatter_nd: reduction"):
        autograd.scatter_nd(x, [[0]], np.zeros((1, 3)), "sub")
