"""reduce_prod and cumprod: forward against numpy, float64 gradients with zeros in x."""

import numpy as np
import pytest

from singa import autograd
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor


def Tensor_(data):
    a = np.asarray(data)
    return Tensor(data=a, dtype=a.dtype, requires_grad=False)


@pytest.mark.parametrize(("axes", "keep"), [(None, 1), ([1], 0), ([0, 2], 1), (-1, 0)])
def test_reduce_prod_forward_and_gradient(axes, keep):
    x = np.random.default_rng(0).uniform(0.5, 1.5, (2, 3, 4))
    x[0, 1, 2] = 0.0  # one zero: the gradient is the product of the others there
    got = autograd.reduce_prod(Tensor_(x), axes, keep).to_numpy()
    ax = None if axes is None else tuple(np.atleast_1d(axes))
    np.testing.assert_allclose(got, np.prod(x, axis=ax, keepdims=bool(keep)))
    gradcheck(lambda t: autograd.reduce_prod(t, axes, keep), [x])


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumprod_forward_and_gradient(exclusive, reverse):
    x = np.random.default_rng(1).uniform(0.5, 1.5, (3, 4))
    x[1, 1] = 0.0
    got = autograd.cumprod(Tensor_(x), 1, exclusive, reverse).to_numpy()
    a = x[:, ::-1] if reverse else x
    want = np.cumprod(np.concatenate([np.ones((3, 1)), a[:, :-1]], 1) if exclusive else a, axis=1)
    np.testing.assert_allclose(got, want[:, ::-1] if reverse else want)
    gradcheck(lambda t: autograd.cumprod(t, 1, exclusive, reverse), [x])
    gradcheck(lambda t: autograd.cumprod(t, -2, exclusive, reverse), [x])


def test_integer_dtype_kept_and_errors():
    x = Tensor_(np.array([[1, 2], [3, 4]], np.int32))
    assert autograd.cumprod(x, 0).dtype == np.int32
    assert autograd.reduce_prod(x, [0], 0).to_numpy().tolist() == [3, 8]
    with pytest.raises(ValueError, match="reduce_prod: repeated axes"):
        autograd.reduce_prod(x, [0, -2])
    with pytest.raises(ValueError, match="cumprod: axis 2"):
        autograd.cumprod(x, 2)
