"""Trigonometric and hyperbolic operators: values against numpy, float64 gradients
against finite differences, SINGA's class form, dtype errors."""

import numpy as np
import pytest

from singa import autograd
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor

# name -> (numpy function, interval inside the domain where the gradient is finite)
FUNCS = {
    "sin": (np.sin, (-3, 3)),
    "cos": (np.cos, (-3, 3)),
    "tan": (np.tan, (-1.2, 1.2)),
    "asin": (np.arcsin, (-0.9, 0.9)),
    "acos": (np.arccos, (-0.9, 0.9)),
    "atan": (np.arctan, (-3, 3)),
    "sinh": (np.sinh, (-2, 2)),
    "cosh": (np.cosh, (-2, 2)),
    "asinh": (np.arcsinh, (-3, 3)),
    "acosh": (np.arccosh, (1.1, 3)),
    "atanh": (np.arctanh, (-0.9, 0.9)),
}


def _x(name, shape=(3, 4), dtype=np.float64):
    lo, hi = FUNCS[name][1]
    return np.random.default_rng(0).uniform(lo, hi, shape).astype(dtype)


@pytest.mark.parametrize("name", FUNCS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forward_matches_numpy_and_keeps_dtype(name, dtype):
    x = _x(name, dtype=dtype)
    y = getattr(autograd, name)(Tensor(data=x, dtype=dtype))
    assert y.dtype == dtype
    np.testing.assert_allclose(y.to_numpy(), FUNCS[name][0](x), rtol=1e-6)


@pytest.mark.parametrize("name", FUNCS)
def test_gradient_float64(name):
    gradcheck(getattr(autograd, name), [_x(name)])


@pytest.mark.parametrize("name", FUNCS)
def test_singa_class_form(name):
    x = Tensor(data=_x(name), dtype=np.float64, requires_grad=True, stores_grad=True)
    cls = getattr(autograd, name.capitalize())
    y = cls()(x)[0]
    assert isinstance(y.creator, cls)
    dx = y.creator.backward(np.ones(x.shape))
    # the derivative from the creator's backward against a central difference
    h = 1e-6
    num = (FUNCS[name][0](x.to_numpy() + h) - FUNCS[name][0](x.to_numpy() - h)) / (2 * h)
    np.testing.assert_allclose(dx, num, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", FUNCS)
def test_integer_input_raises_naming_op(name):
    with pytest.raises(ValueError, match=rf"^{name}: .*floating-point.*int64"):
        getattr(autograd, name)(Tensor(data=np.ones(3, np.int64), dtype=np.int64))


def test_outside_the_domain_gives_nan_as_numpy():
    with np.errstate(invalid="ignore"):
        y = autograd.asin(Tensor(data=np.array([2.0, 0.5])))
    assert np.isnan(y.to_numpy()[0]) and y.to_numpy()[1] == pytest.approx(np.arcsin(0.5))
