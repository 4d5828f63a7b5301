"""SINGA's operator classes (``autograd.Xxx(*args)(*inputs)``): each gives the value of
our function with SINGA's constructor arguments, and its result's creator
differentiates (float64 gradient checks through the class form)."""

import numpy as np
import pytest

from singa import autograd
from singa.autograd import activation, elementwise, linalg, shaping
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor


def T(a, requires_grad=True):
    a = np.asarray(a)
    return Tensor(data=a, dtype=a.dtype, requires_grad=requires_grad, stores_grad=requires_grad)


def test_aliases_are_our_classes():
    assert autograd.Matmul is linalg.MatMul and autograd.Gemm is linalg.Gemm
    assert autograd.SeLU is activation.Selu and autograd.LeakyRelu is activation.LeakyReLU
    assert autograd.Add is elementwise.Add and autograd.Reshape is shaping.Reshape
    assert autograd.SoftMax is activation.SoftMax and autograd.Sigmoid is activation.Sigmoid


RNG = np.random.default_rng(10)
X = RNG.standard_normal((2, 3, 4))

# (class call, our function call, inputs)
CASES = {
    "Add": (lambda a, b: autograd.Add()(a, b)[0], lambda a, b: autograd.add(a, b), [X, X[0]]),
    "Matmul": (lambda a, b: autograd.Matmul()(a, b)[0], autograd.matmul, [X[0], X[1].T]),
    "Gemm": (
        lambda a, b: autograd.Gemm(0.5, 1.0, 0, 1)(a, b)[0],
        lambda a, b: autograd.gemm(a, b, None, 0.5, 1.0, 0, 1),
        [X[0], X[1]],
    ),
    "SoftMax": (lambda a: autograd.SoftMax(2)(a)[0], lambda a: autograd.softmax(a, 2), [X]),
    "Concat": (lambda a, b: autograd.Concat(-1)(a, b)[0], lambda a, b: autograd.cat([a, b], -1), [X, X]),
    "Flatten": (lambda a: autograd.Flatten(2)(a)[0], lambda a: autograd.flatten(a, 2), [X]),
    "Squeeze": (lambda a: autograd.Squeeze([])(a)[0], lambda a: autograd.squeeze(a), [X[:, :1]]),
    "Unsqueeze": (lambda a: autograd.Unsqueeze([0, 2])(a)[0], lambda a: autograd.unsqueeze(a, [0, 2]), [X]),
    "Split": (lambda a: autograd.Split(2, None, 2)(a)[1], lambda a: autograd.split(a, 2, 2)[1], [X]),
    "Slice": (lambda a: autograd.Slice([1], [3], [2])(a)[0], lambda a: autograd.slice(a, [1], [3], [2]), [X]),
    "Gather": (lambda a: autograd.Gather(1, [2, 0])(a)[0], lambda a: autograd.gather(a, 1, [2, 0]), [X]),
    "Tile": (lambda a: autograd.Tile([1, 2, 1])(a)[0], lambda a: autograd.tile(a, [1, 2, 1]), [X]),
    "Where": (
        lambda a, b: autograd.Where(X[0] > 0)(a, b)[0],
        lambda a, b: autograd.where(a, b, X[0] > 0),
        [X[0], X[1]],
    ),
    "ReduceSum": (lambda a: autograd.ReduceSum([1], 0)(a)[0], lambda a: autograd.reduce_sum(a, [1], 0), [X]),
    "ReduceMean": (lambda a: autograd.ReduceMean(None)(a)[0], lambda a: autograd.reduce_mean(a), [X]),
    "MeanSquareError": (
        lambda a: autograd.MeanSquareError(T(X[1], False))(a)[0],
        lambda a: autograd.mse_loss(a, T(X[1], False)),
        [X[0]],
    ),
    "CrossEntropy": (
        lambda a: autograd.CrossEntropy(T(np.eye(4)[[1, 3, 0]], False))(a)[0],
        lambda a: autograd.cross_entropy(a, T(np.eye(4)[[1, 3, 0]], False)),
        [np.abs(X[0]) + 0.1],
    ),
    "SoftMaxCrossEntropy": (
        lambda a: autograd.SoftMaxCrossEntropy(T(np.array([1, 3, 0]), False))(a)[0],
        lambda a: autograd.softmax_cross_entropy(a, T(np.array([1, 3, 0]), False)),
        [X[0]],
    ),
    "BinaryCrossEntropy": (
        lambda a: autograd.BinaryCrossEntropy(T(np.abs(np.tanh(X[1])), False))(a)[0],
        lambda a: autograd.binary_cross_entropy(a, T(np.abs(np.tanh(X[1])), False)),
        [1 / (1 + np.exp(-X[0]))],
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_class_form_equals_function_and_differentiates(name):
    by_class, by_function, inputs = CASES[name]
    a = by_class(*[T(x) for x in inputs])
    b = by_function(*[T(x) for x in inputs])
    np.testing.assert_allclose(a.to_numpy(), b.to_numpy(), rtol=1e-14)
    gradcheck(by_class, inputs)


def test_dropout_class_takes_singa_seed_and_ratio():
    x = T(np.ones((100, 100)))
    y = autograd.Dropout(0, 0.25)(x)[0].to_numpy()
    kept = y != 0
    assert 0.7 < kept.mean() < 0.8
    np.testing.assert_allclose(y[kept], 1 / 0.75)
    prev = autograd.training
    autograd.training = False
    try:
        np.testing.assert_array_equal(autograd.Dropout(0, 0.25)(x)[0].to_numpy(), 1.0)
    finally:
        autograd.training = prev
