"""shape and constant_of_shape: values and dtypes, no gradient, SINGA's forms, errors."""

import numpy as np
import pytest

from singa import autograd
from singa.tensor import Tensor


def T(a, dtype=None, requires_grad=True):
    a = np.asarray(a, dtype=dtype)
    return Tensor(data=a, dtype=a.dtype, requires_grad=requires_grad, stores_grad=requires_grad)


@pytest.mark.parametrize("shape", [(), (3,), (2, 0, 4), (1, 2, 3, 4)])
def test_shape_is_an_int64_vector(shape):
    y = autograd.shape(T(np.zeros(shape, np.float32)))
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y.to_numpy(), np.array(shape, np.int64))
    assert autograd.Shape()(T(np.zeros(shape)))[0].creator.backward(np.ones(len(shape))) is None


def test_shape_is_not_shadowed_by_a_module():
    assert callable(autograd.shape)


@pytest.mark.parametrize(
    ("value", "dtype"),
    [(0, np.float32), (2.5, np.float32), (np.int32(7), np.int32), (np.array([1.5]), np.float64)],
)
def test_constant_of_shape_value_and_dtype(value, dtype):
    y = autograd.constant_of_shape(T([2, 3], np.int64, requires_grad=False), value)
    assert y.dtype == dtype and y.shape == (2, 3)
    np.testing.assert_array_equal(y.to_numpy(), np.full((2, 3), np.asarray(value).reshape(()), dtype))


def test_constant_of_shape_from_shape_and_list():
    x = T(np.ones((4, 1)))
    np.testing.assert_array_equal(autograd.constant_of_shape(autograd.shape(x)).to_numpy(), np.zeros((4, 1)))
    assert autograd.constant_of_shape([0, 2], 1.0).shape == (0, 2)
    assert autograd.ConstantOfShape(3.0)(T([2], np.int64))[0].to_numpy().tolist() == [3.0, 3.0]


def test_constant_of_shape_errors():
    with pytest.raises(
        ValueError, match=r"^constant_of_shape: x must be a 1-D tensor of non-negative integers"
    ):
        autograd.constant_of_shape(T([2, -1], np.int64))
    with pytest.raises(ValueError, match=r"^constant_of_shape: value must be one number"):
        autograd.constant_of_shape(T([2], np.int64), [1, 2])
