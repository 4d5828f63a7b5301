"""Elementwise operators: gradients (finite differences, float64), forward values against
numpy, broadcasting, dtypes, conventions at ties and bounds, errors, needs_grad."""

import math

import numpy as np
import pytest

from singa import autograd
from singa.autograd import elementwise as ew
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor


def T(a, requires_grad=True, dtype=None):
    a = np.asarray(a, dtype=dtype)
    return Tensor(data=a, dtype=a.dtype, requires_grad=requires_grad, stores_grad=requires_grad)


def grads(y, *xs, dy=None):
    dy = np.ones(y.shape, y.dtype) if dy is None else dy
    g = autograd.gradients(y, dy)
    return [g[x].to_numpy() if x in g else None for x in xs]


BROADCAST_SHAPES = [
    ((3, 4), (3, 4)),
    ((3, 4), (4,)),
    ((2, 1, 3), (4, 1)),
    ((), (2, 3)),
    ((2, 3), ()),
    ((3, 1), (1, 4)),
]


def _inputs(name, sa, sb, seed=0):
    """Inputs away from the ops' singular points (b != 0 for div, a > 0 for pow) and
    from ties (maximum/minimum)."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(-2, 2, sa)
    b = rng.uniform(-2, 2, sb)
    if name == "div":
        b = rng.uniform(0.5, 2, sb) * rng.choice([-1.0, 1.0], sb)
    if name == "pow":
        a = rng.uniform(0.5, 2, sa)
    if name in ("maximum", "minimum"):
        # interleave the values so |a - b| >= 0.05 everywhere after broadcasting
        a = rng.integers(-20, 20, sa) * 0.1
        b = rng.integers(-20, 20, sb) * 0.1 + 0.05
    return a, b


BINARY = {
    "add": (autograd.add, np.add),
    "sub": (autograd.sub, np.subtract),
    "mul": (autograd.mul, np.multiply),
    "div": (autograd.div, np.divide),
    "pow": (autograd.pow, np.power),
    "maximum": (autograd.maximum, np.maximum),
    "minimum": (autograd.minimum, np.minimum),
}


@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("sa,sb", BROADCAST_SHAPES)
def test_binary_gradcheck_and_forward(name, sa, sb):
    fn, ref = BINARY[name]
    a, b = _inputs(name, sa, sb)
    gradcheck(fn, [a, b])
    y = fn(T(a, False), T(b, False))
    np.testing.assert_allclose(y.to_numpy(), ref(a, b), rtol=1e-14, atol=0)


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_gradient_only_for_inputs_that_need_it(name):
    fn, _ = BINARY[name]
    a, b = _inputs(name, (3, 4), (4,))
    for need in [(True, False), (False, True)]:
        ta, tb = T(a, need[0]), T(b, need[1])
        y = fn(ta, tb)
        op = y.creator
        assert op.needs_grad == need
        da, db = op.backward(np.ones(y.shape))
        assert (da is None) == (not need[0]) and (db is None) == (not need[1])
        got = da if need[0] else db
        assert got.shape == (a.shape if need[0] else b.shape)


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_keeps_float32_and_checks_shapes(name):
    fn, _ = BINARY[name]
    a, b = _inputs(name, (3, 4), (4,))
    ta, tb = T(a, dtype=np.float32), T(b, dtype=np.float32)
    y = fn(ta, tb)
    assert y.dtype == np.float32
    ga, gb = grads(y, ta, tb)
    assert ga.dtype == np.float32 and gb.dtype == np.float32
    assert ga.shape == (3, 4) and gb.shape == (4,)
    with pytest.raises(ValueError, match=rf"{name}: shapes \(3, 4\) and \(3,\)"):
        fn(ta, T(np.ones(3, np.float32)))


def test_binary_mixed_dtypes_follow_pytorch():
    x = T(np.array([1.5, 2.0], np.float32))
    k = T(np.array([2, 3], np.int64), requires_grad=False)
    y = autograd.mul(x, k)
    assert y.dtype == np.float32
    (gx,) = grads(y, x)
    assert gx.dtype == np.float32
    np.testing.assert_array_equal(gx, [2, 3])
    # float32 with float64 promotes; the float32 input still gets a float32 gradient
    w = T(np.array([1.0, 2.0], np.float64))
    y = autograd.add(x, w)
    assert y.dtype == np.float64
    gx, gw = grads(y, x, w)
    assert gx.dtype == np.float32 and gw.dtype == np.float64


def test_binary_accepts_python_numbers():
    x = T(np.array([1.0, 2.0], np.float32))
    y = autograd.mul(x, 3.0)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y.to_numpy(), [3.0, 6.0])
    np.testing.assert_array_equal(autograd.sub(1.0, x).to_numpy(), [0.0, -1.0])
    np.testing.assert_allclose(autograd.pow(x, 2).to_numpy(), [1.0, 4.0])
    np.testing.assert_allclose(autograd.pow(2.0, x).to_numpy(), [2.0, 4.0])
    np.testing.assert_array_equal(grads(autograd.div(x, 4), x)[0], [0.25, 0.25])
    with pytest.raises(TypeError, match="Tensor"):
        autograd.add(1.0, 2.0)


def test_tensor_operators_use_these_ops():
    a = T(np.array([2.0, 3.0]))
    b = T(np.array([4.0, 5.0]))
    y = (a + b) * a - b / a + a**2 + (-a)
    ga, gb = grads(y, a, b)
    av, bv = a.to_numpy(), b.to_numpy()
    np.testing.assert_allclose(ga, 2 * av + bv + bv / av**2 + 2 * av - 1)
    np.testing.assert_allclose(gb, av - 1 / av)


def test_pow_gradient_conventions():
    a = T(np.array([0.0, 0.0, 2.0, -2.0, 0.0]))
    b = T(np.array([0.0, 2.0, 0.0, 2.0, 0.5]))
    y = autograd.pow(a, b)
    np.testing.assert_array_equal(y.to_numpy(), [1.0, 0.0, 1.0, 4.0, 0.0])
    ga, gb = grads(y, a, b)
    # d/da = b a^(b-1), 0 where b == 0 (0 * 0^-1 would be nan); infinite at a = 0, b = 0.5
    np.testing.assert_array_equal(ga, [0.0, 0.0, 0.0, -4.0, np.inf])
    # d/db = y log a where a > 0, 0 where a <= 0
    np.testing.assert_allclose(gb, [0.0, 0.0, np.log(2.0), 0.0, 0.0])
    # negative base with an integer exponent: d/da is still defined
    gradcheck(lambda x: autograd.pow(x, 3.0), [np.array([-1.5, -0.5, 0.7])])


def test_pow_scalar_exponent_gradient_reduces_to_scalar_shape():
    rng = np.random.default_rng(3)
    gradcheck(autograd.pow, [rng.uniform(0.5, 2, (2, 3)), np.array(1.7)])


@pytest.mark.parametrize("fn,ref", [(autograd.maximum, np.maximum), (autograd.minimum, np.minimum)])
def test_maximum_minimum_split_gradient_at_ties(fn, ref):
    a = T(np.array([1.0, 2.0, 3.0, -1.0]))
    b = T(np.array([1.0, 0.0, 5.0, -1.0]))
    y = fn(a, b)
    np.testing.assert_array_equal(y.to_numpy(), ref(a.to_numpy(), b.to_numpy()))
    dy = np.array([2.0, 3.0, 5.0, 7.0])
    ga, gb = grads(y, a, b, dy=dy)
    a_wins = np.array([0.0, 1.0, 0.0, 0.0]) if fn is autograd.maximum else np.array([0.0, 0.0, 1.0, 0.0])
    w = a_wins + np.array([0.5, 0, 0, 0.5])
    np.testing.assert_array_equal(ga, dy * w)
    np.testing.assert_array_equal(gb, dy * (1 - w))


def test_maximum_ties_with_broadcasting_sum_correctly():
    a = T(np.array([[1.0, 2.0], [1.0, 0.0]]))
    b = T(np.array([1.0]))
    ga, gb = grads(autograd.maximum(a, b), a, b)
    np.testing.assert_array_equal(ga, [[0.5, 1.0], [0.5, 0.0]])
    np.testing.assert_array_equal(gb, [0.5 + 0.5 + 1.0])


UNARY = {
    "neg": (autograd.neg, np.negative, (-2, 2)),
    "exp": (autograd.exp, np.exp, (-2, 2)),
    "log": (autograd.log, np.log, (0.3, 3)),
    "sqrt": (autograd.sqrt, np.sqrt, (0.3, 3)),
    "abs": (autograd.abs, np.abs, (-2, 2)),
    "sign": (autograd.sign, np.sign, (-2, 2)),
    "clip": (lambda x: autograd.clip(x, -0.5, 0.7), lambda x: np.clip(x, -0.5, 0.7), (-2, 2)),
    "clip_min": (lambda x: autograd.clip(x, min=-0.5), lambda x: np.maximum(x, -0.5), (-2, 2)),
    "clip_max": (lambda x: autograd.clip(x, max=0.7), lambda x: np.minimum(x, 0.7), (-2, 2)),
}


def _away_from(x, points, margin=0.02):
    for p in points:
        near = np.abs(x - p) < margin
        x = np.where(near, p + margin * np.sign(x - p + 1e-300) * 2, x)
    return x


@pytest.mark.parametrize("name", list(UNARY))
@pytest.mark.parametrize("shape", [(5,), (2, 3, 4), ()])
def test_unary_gradcheck_and_forward(name, shape):
    fn, ref, (lo, hi) = UNARY[name]
    x = np.random.default_rng(1).uniform(lo, hi, shape)
    x = _away_from(x, [0.0, -0.5, 0.7])  # kinks of abs/sign/clip
    gradcheck(fn, [x])
    np.testing.assert_allclose(fn(T(x, False)).to_numpy(), ref(x), rtol=1e-14, atol=0)


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_float32_and_no_cache_without_grad(name):
    fn, _, (lo, hi) = UNARY[name]
    x = np.random.default_rng(2).uniform(lo, hi, (3, 4)).astype(np.float32)
    tx = T(x)
    y = fn(tx)
    assert y.dtype == np.float32
    (g,) = grads(y, tx)
    assert g.dtype == np.float32 and g.shape == x.shape
    frozen = fn(T(x, requires_grad=False))
    assert frozen.creator.cache is None and frozen.dtype == np.float32  # recorded, no cache


def test_unary_ops_keep_nothing_when_not_recording():
    x = T(np.array([0.5, 1.5]), requires_grad=False)
    for op in [ew.Exp(), ew.Log(), ew.Sqrt(), ew.Abs(), ew.Sign(), ew.Clip(0.0, 1.0)]:
        op(x)
        assert op.cache is None
    autograd.training = False
    op = ew.Exp()
    op(T(np.array([0.5, 1.5])))
    assert op.cache is None


def test_abs_and_sign_gradients_at_zero_are_zero():
    x = T(np.array([-2.0, 0.0, 3.0]))
    (g,) = grads(autograd.abs(x), x)
    np.testing.assert_array_equal(g, [-1.0, 0.0, 1.0])
    (g,) = grads(autograd.sign(x), x)
    np.testing.assert_array_equal(g, [0.0, 0.0, 0.0])


def test_clip_gradient_passes_at_bounds_and_not_outside():
    x = T(np.array([-1.0, -0.5, 0.0, 0.5, 1.0]))
    y = autograd.clip(x, -0.5, 0.5)
    np.testing.assert_array_equal(y.to_numpy(), [-0.5, -0.5, 0.0, 0.5, 0.5])
    (g,) = grads(y, x)
    np.testing.assert_array_equal(g, [0.0, 1.0, 1.0, 1.0, 0.0])
    op = y.creator
    assert (op.min, op.max) == (-0.5, 0.5)


def test_clip_without_bounds_is_a_copy_and_min_above_max_gives_max():
    a = np.array([-1.0, 2.0])
    x = T(a)
    y = autograd.clip(x)
    np.testing.assert_array_equal(y.to_numpy(), a)
    assert not np.shares_memory(y.data, x.data)
    np.testing.assert_array_equal(grads(y, x)[0], [1.0, 1.0])
    x = T(a)
    y = autograd.clip(x, 1.0, 0.0)
    np.testing.assert_array_equal(y.to_numpy(), [0.0, 0.0])
    np.testing.assert_array_equal(grads(y, x)[0], [0.0, 0.0])


def test_clip_keeps_float32_with_python_bounds():
    x = T(np.array([-3.0, 0.25, 3.0], np.float32))
    y = autograd.clip(x, -1.0, 1.0)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y.to_numpy(), np.array([-1.0, 0.25, 1.0], np.float32))


def test_backward_does_not_modify_dy():
    rng = np.random.default_rng(4)
    a, b = T(rng.uniform(0.5, 2, (3, 4))), T(rng.uniform(0.5, 2, (4,)))
    for fn in [autograd.add, autograd.sub, autograd.mul, autograd.div, autograd.pow, autograd.maximum]:
        y = fn(a, b)
        dy = rng.standard_normal(y.shape)
        keep = dy.copy()
        y.creator.backward(dy)
        np.testing.assert_array_equal(dy, keep)


def test_erf_gradcheck_and_forward():
    x = np.random.default_rng(3).normal(size=(3, 4)) * 1.5
    gradcheck(autograd.erf, [x])
    got = autograd.erf(Tensor(data=x, dtype=np.float64)).to_numpy()
    want = np.array([math.erf(v) for v in x.reshape(-1)]).reshape(x.shape)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    assert autograd.erf(Tensor(data=x.astype(np.float16), dtype=np.float16)).dtype == np.float16


def test_cast_gradcheck_and_forward():
    x = np.random.default_rng(4).normal(size=(2, 3))
    gradcheck(
        lambda t: autograd.mul(autograd.cast(autograd.cast(t, np.float32), np.float64), t),
        [x],
        eps=1e-2,
        atol=1e-4,
    )
    y = autograd.cast(Tensor(data=x, dtype=np.float64), np.int32)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y.to_numpy(), x.astype(np.int32))
    t = Tensor(data=x, dtype=np.float64)
    assert autograd.cast(t, np.float64) is t


# ----- SINGA's identity, negative, reciprocal -----------------------------------------------
def test_identity_negative_reciprocal_values_and_gradients():
    x = np.random.default_rng(4).uniform(0.5, 2, (3, 4)) * np.random.default_rng(5).choice([-1, 1], (3, 4))
    np.testing.assert_array_equal(autograd.identity(T(x)).to_numpy(), x)
    np.testing.assert_array_equal(autograd.negative(T(x)).to_numpy(), -x)
    np.testing.assert_allclose(autograd.reciprocal(T(x)).to_numpy(), 1 / x, rtol=1e-15)
    for fn in (autograd.identity, autograd.negative, autograd.reciprocal):
        gradcheck(fn, [x])


def test_singa_classes_identity_negative_reciprocal():
    x = T(np.array([2.0, -4.0], np.float32))
    assert autograd.Negative is ew.Neg
    for cls, dx in (
        (autograd.Identity, [1, 1]),
        (autograd.Negative, [-1, -1]),
        (autograd.Reciprocal, [-0.25, -0.0625]),
    ):
        y = cls()(x)[0]
        np.testing.assert_allclose(y.creator.backward(np.ones(2, np.float32)), dx)


def test_reciprocal_of_integers_raises():
    with pytest.raises(ValueError, match=r"^reciprocal: needs a floating-point tensor, got int64"):
        autograd.reciprocal(T(np.arange(3)))
