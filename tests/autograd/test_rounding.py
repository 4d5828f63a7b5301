"""Rounding operators: values (halves, negatives, signed zeros) against numpy and
SINGA's definitions, zero gradients, dtype errors."""

from decimal import ROUND_HALF_UP, Decimal

import numpy as np
import pytest

from singa import autograd
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor

X = np.array(
    [0.1, 0.5, 0.9, 1.2, 1.5, 1.8, 2.3, 2.5, 2.7, -1.1, -1.5, -1.9, -2.2, -2.5, -2.8, 0.49999999999999994]
)


def T(a, dtype=np.float64):
    return Tensor(data=np.asarray(a, dtype=dtype), dtype=dtype, requires_grad=True, stores_grad=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_values(dtype):
    x = X.astype(dtype)
    np.testing.assert_array_equal(autograd.ceil(T(x, dtype)).to_numpy(), np.ceil(x))
    np.testing.assert_array_equal(autograd.floor(T(x, dtype)).to_numpy(), np.floor(x))
    np.testing.assert_array_equal(autograd.rounde(T(x, dtype)).to_numpy(), np.round(x))
    # C's round: halves away from zero, from the exact decimal value of each float
    away = [float(Decimal(float(v)).quantize(Decimal(1), ROUND_HALF_UP)) for v in x]
    np.testing.assert_array_equal(autograd.round(T(x, dtype)).to_numpy(), np.array(away, dtype))
    assert autograd.round(T(x, dtype)).dtype == dtype


def test_halves_away_from_zero_and_to_even():
    x = T([0.5, 1.5, 2.5, -0.5, -2.5])
    np.testing.assert_array_equal(autograd.round(x).to_numpy(), [1, 2, 3, -1, -3])
    np.testing.assert_array_equal(autograd.rounde(x).to_numpy(), [0, 2, 2, -0.0, -2])


@pytest.mark.parametrize("name", ["ceil", "floor", "round", "rounde"])
def test_gradient_is_zero(name):
    x = np.random.default_rng(0).uniform(-3, 3, (3, 4)) + 0.25  # away from the jumps
    x = np.where(np.abs(x - np.round(x * 2) / 2) < 0.01, x + 0.05, x)
    gradcheck(getattr(autograd, name), [x])
    y = getattr(autograd, name.capitalize())()(T(x))[0]
    np.testing.assert_array_equal(y.creator.backward(np.ones((3, 4))), np.zeros((3, 4)))


@pytest.mark.parametrize("name", ["ceil", "floor", "round", "rounde"])
def test_integer_input_raises(name):
    with pytest.raises(ValueError, match=rf"^{name}: .*floating-point"):
        getattr(autograd, name)(Tensor(data=np.arange(3), dtype=np.int64))
