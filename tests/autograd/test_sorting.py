"""topk: values and indices against numpy (ties: lower index first), float64 gradient."""

import numpy as np
import pytest

from singa import autograd
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor


def Tensor_(data):
    a = np.asarray(data)
    return Tensor(data=a, dtype=a.dtype, requires_grad=False)


@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_a_stable_sort(largest):
    x = np.array([[3.0, 1.0, 3.0, 2.0], [0.0, 5.0, 5.0, -1.0]])
    v, i = autograd.topk(Tensor_(x), 3, axis=1, largest=largest)
    order = np.argsort(-x if largest else x, axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(i.to_numpy(), order)
    np.testing.assert_array_equal(v.to_numpy(), np.take_along_axis(x, order, 1))
    assert i.dtype == np.int64


def test_topk_gradient_and_unsigned_input():
    x = np.random.default_rng(0).standard_normal((3, 5))
    gradcheck(lambda t: autograd.topk(t, 2, axis=0)[0], [x])
    u = np.array([1, 250, 7], np.uint8)
    v, i = autograd.topk(Tensor_(u), 2)
    np.testing.assert_array_equal(v.to_numpy(), [250, 7])


def test_topk_k_out_of_range():
    with pytest.raises(ValueError, match="topk: k=5"):
        autograd.topk(Tensor_(np.zeros((2, 4))), 5)
