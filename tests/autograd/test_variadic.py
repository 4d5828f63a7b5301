"""Max, Min, Sum and Mean over several tensors: values against numpy with
broadcasting, float64 gradients, SINGA's expected gradients, ties, errors."""

import numpy as np
import pytest

from singa import autograd
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor


def T(a, dtype=None):
    a = np.asarray(a, dtype=dtype)
    return Tensor(data=a, dtype=a.dtype, requires_grad=True, stores_grad=True)


SHAPES = [[(3, 4)], [(3, 4), (3, 4)], [(2, 1, 4), (3, 1), (4,)], [(), (2, 3), (3,)]]


def _distinct(shapes, seed=0):
    """Inputs whose broadcast values never tie (so max/min are differentiable)."""
    rng = np.random.default_rng(seed)
    out = []
    for k, s in enumerate(shapes):
        out.append(rng.integers(-30, 30, s) * 0.1 + 0.01 * (k + 1) / (len(shapes) + 1))
    return out


@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize(("name", "ref"), [("max", np.maximum), ("min", np.minimum)])
def test_extremes_match_numpy_and_gradcheck(shapes, name, ref):
    xs = _distinct(shapes)
    y = getattr(autograd, name)(*[T(x) for x in xs])
    want = xs[0] if len(xs) == 1 else ref.reduce(np.broadcast_arrays(*xs))
    np.testing.assert_array_equal(y.to_numpy(), want)
    gradcheck(lambda *ts: getattr(autograd, name)(*ts), xs)


@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("cls", ["Sum", "Mean"])
def test_sum_and_mean_classes(shapes, cls):
    xs = _distinct(shapes)
    y = getattr(autograd, cls)()(*[T(x) for x in xs])[0]
    want = sum(np.broadcast_arrays(*xs)) if len(xs) > 1 else xs[0]
    want = want / len(xs) if cls == "Mean" else want
    np.testing.assert_allclose(y.to_numpy(), want, rtol=1e-12)
    gradcheck(lambda *ts: getattr(autograd, cls)()(*ts)[0], xs)


def test_singa_three_input_max_gradients():
    x0, x1, x2 = T([3, 2, 1], np.float32), T([1, 4, 4], np.float32), T([2, 5, 3], np.float32)
    y = autograd.max(x0, x1, x2)
    np.testing.assert_array_equal(y.to_numpy(), [3, 5, 4])
    dx = y.creator.backward(np.ones(3, np.float32))
    np.testing.assert_array_equal(np.stack(dx), [[1, 0, 0], [0, 0, 1], [0, 1, 0]])


def test_ties_share_the_gradient_equally():
    a, b, c = T([1.0, 2.0]), T([1.0, 0.0]), T([1.0, 2.0])
    g = autograd.gradients(autograd.max(a, b, c), np.array([6.0, 6.0]))
    np.testing.assert_array_equal(g[a].to_numpy(), [2, 3])
    np.testing.assert_array_equal(g[b].to_numpy(), [2, 0])
    np.testing.assert_array_equal(g[c].to_numpy(), [2, 3])


def test_single_input_is_a_copy_with_gradient_one():
    x = T([1.0, -2.0])
    y = autograd.min(x)
    assert y.data is not x.data
    np.testing.assert_array_equal(autograd.gradients(y, np.ones(2))[x].to_numpy(), [1, 1])


def test_errors_name_the_op():
    with pytest.raises(ValueError, match=r"^max: needs inputs of one dtype"):
        autograd.max(T([1.0], np.float32), T([1.0], np.float64))
    with pytest.raises(ValueError, match=r"^min: shapes \(2,\), \(3,\) cannot be broadcast"):
        autograd.min(T([1.0, 2.0]), T([1.0, 2.0, 3.0]))
    with pytest.raises(TypeError, match=r"^max: needs one or more Tensors"):
        autograd.max()
