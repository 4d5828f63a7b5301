"""Comparison and logic operators: boolean results against numpy with broadcasting,
Python-number operands, no gradient to the inputs, errors."""

import numpy as np
import pytest

from singa import autograd
from singa.tensor import Tensor

BINARY = {
    "greater": np.greater,
    "less": np.less,
    "equal": np.equal,
    "greater_equal": np.greater_equal,
    "less_equal": np.less_equal,
    "_and": np.logical_and,
    "_or": np.logical_or,
    "_xor": np.logical_xor,
}
CLASSES = {
    "greater": "Greater",
    "less": "Less",
    "equal": "Equal",
    "greater_equal": "GreaterEqual",
    "less_equal": "LessEqual",
    "_and": "And",
    "_or": "Or",
    "_xor": "Xor",
}


def T(a, dtype=None, requires_grad=True):
    a = np.asarray(a, dtype=dtype)
    return Tensor(data=a, dtype=a.dtype, requires_grad=requires_grad, stores_grad=requires_grad)


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize(("sa", "sb"), [((3, 4), (3, 4)), ((2, 1, 4), (3, 1)), ((), (2, 3))])
def test_binary_matches_numpy_with_broadcasting(name, sa, sb):
    rng = np.random.default_rng(1)
    a = rng.integers(-1, 2, sa).astype(np.float32)  # many zeros and ties
    b = rng.integers(-1, 2, sb).astype(np.float32)
    y = getattr(autograd, name)(T(a), T(b))
    assert y.dtype == np.bool_
    np.testing.assert_array_equal(y.to_numpy(), BINARY[name](a, b))


@pytest.mark.parametrize("name", BINARY)
def test_class_form_and_no_gradient_to_the_inputs(name):
    a, b = T([0.0, 1.0, 2.0]), T([1.0, 1.0, 0.0])
    y = getattr(autograd, CLASSES[name])()(a, b)[0]
    assert y.creator.backward(np.ones(3)) == (None, None)
    # a graph through the comparison gives the inputs no gradient at all
    loss = autograd.reduce_sum(autograd.mul(y, a))
    g = autograd.gradients(loss)
    np.testing.assert_array_equal(g[a].to_numpy(), BINARY[name](a.to_numpy(), b.to_numpy()))
    assert b not in g


def test_not_is_true_at_zero():
    x = T([-1.5, 0.0, 2.0, -0.0])
    y = autograd._not(x)
    np.testing.assert_array_equal(y.to_numpy(), [False, True, False, True])
    assert autograd.Not()(x)[0].creator.backward(np.ones(4)) is None


def test_python_number_operands_keep_their_value():
    xi = T([0, 1, 2], dtype=np.int64, requires_grad=False)
    np.testing.assert_array_equal(autograd.greater(xi, 0.5).to_numpy(), [False, True, True])
    np.testing.assert_array_equal(autograd.less(1, xi).to_numpy(), [False, False, True])
    xf = T([0.25, 1.0], dtype=np.float32)
    np.testing.assert_array_equal(autograd.equal(xf, 0.25).to_numpy(), [True, False])


def test_logic_on_integer_and_bool_inputs():
    a = T([0, 3, -2, 0], dtype=np.int32, requires_grad=False)
    b = T([True, True, False, False], requires_grad=False)
    np.testing.assert_array_equal(autograd._and(a, b).to_numpy(), [False, True, False, False])
    np.testing.assert_array_equal(autograd._xor(a, b).to_numpy(), [True, False, True, False])


def test_shapes_that_do_not_broadcast_raise_naming_op():
    with pytest.raises(ValueError, match=r"^greater: shapes \(3,\) and \(4,\)"):
        autograd.greater(T(np.ones(3)), T(np.ones(4)))
    with pytest.raises(TypeError, match="^_or: at least one operand"):
        autograd._or(1, 2)
