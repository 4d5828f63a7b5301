"""Activations: gradients (finite differences, float64), forward values against closed
formulas (GELU against math.erf), stability at extreme inputs, axes, dtypes, errors."""

import math
import warnings

import numpy as np
import pytest

from singa import autograd
from singa.autograd import activation as act
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor


def T(a, requires_grad=True, dtype=None):
    a = np.asarray(a, dtype=dtype)
    return Tensor(data=a, dtype=a.dtype, requires_grad=requires_grad, stores_grad=requires_grad)


def grad_of(y, x, dy=None):
    dy = np.ones(y.shape, y.dtype) if dy is None else dy
    return autograd.gradients(y, dy)[x].to_numpy()


_erf = np.vectorize(math.erf)
SELU_A, SELU_G = 1.67326324, 1.05070098


def _sig(x):
    return 1 / (1 + np.exp(-x))


# name: (function, closed-form reference, points where the derivative jumps)
ACTIVATIONS = {
    "relu": (autograd.relu, lambda x: np.where(x > 0, x, 0.0), [0.0]),
    "leakyrelu": (autograd.leakyrelu, lambda x: np.where(x > 0, x, 0.01 * x), [0.0]),
    "leakyrelu_0.3": (
        lambda x: autograd.leakyrelu(x, a=0.3),
        lambda x: np.where(x > 0, x, 0.3 * x),
        [0.0],
    ),
    "elu": (autograd.elu, lambda x: np.where(x > 0, x, np.exp(x) - 1), []),
    "elu_2": (lambda x: autograd.elu(x, alpha=2.0), lambda x: np.where(x > 0, x, 2 * (np.exp(x) - 1)), [0.0]),
    "selu": (autograd.selu, lambda x: SELU_G * np.where(x > 0, x, SELU_A * (np.exp(x) - 1)), [0.0]),
    "sigmoid": (autograd.sigmoid, _sig, []),
    "tanh": (autograd.tanh, np.tanh, []),
    "softplus": (autograd.softplus, lambda x: np.log(1 + np.exp(x)), []),
    "softsign": (autograd.softsign, lambda x: x / (1 + np.abs(x)), []),
    "gelu": (autograd.gelu, lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), []),
    "gelu_tanh": (
        lambda x: autograd.gelu(x, approximate="tanh"),
        lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
        [],
    ),
    "hardsigmoid": (autograd.hardsigmoid, lambda x: np.clip(0.2 * x + 0.5, 0, 1), [-2.5, 2.5]),
    "hardsigmoid_onnx": (
        lambda x: autograd.hardsigmoid(x, alpha=0.5, beta=0.25),
        lambda x: np.clip(0.5 * x + 0.25, 0, 1),
        [-0.5, 1.5],
    ),
    "hardsigmoid_singa": (  # SINGA's signature hardsigmoid(x, alpha, gamma)
        lambda x: autograd.hardsigmoid(x, alpha=0.4, gamma=0.3),
        lambda x: np.clip(0.4 * x + 0.3, 0, 1),
        [-0.75, 1.75],
    ),
}


def _inputs(shape, kinks, seed=0, scale=3.0):
    """Values in [-scale, scale] at least 0.05 away from every kink."""
    x = np.random.default_rng(seed).uniform(-scale, scale, shape)
    for k in kinks:
        d = x - k
        x = np.where(np.abs(d) < 0.05, k + np.where(d >= 0, 0.1, -0.1), x)
    return x


@pytest.mark.parametrize("name", list(ACTIVATIONS))
@pytest.mark.parametrize("shape", [(7,), (2, 3, 4), ()])
def test_gradcheck_and_forward(name, shape):
    fn, ref, kinks = ACTIVATIONS[name]
    x = _inputs(shape, kinks)
    gradcheck(fn, [x])
    np.testing.assert_allclose(fn(T(x, False)).to_numpy(), ref(x), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_float32_in_float32_out(name):
    fn, ref, _ = ACTIVATIONS[name]
    x = _inputs((4, 5), [], seed=1).astype(np.float32)
    tx = T(x)
    y = fn(tx)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.to_numpy(), ref(x.astype(np.float64)), rtol=2e-6, atol=2e-7)
    g = grad_of(y, tx)
    assert g.dtype == np.float32 and g.shape == x.shape


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_nothing_kept_without_grad(name):
    fn, _, _ = ACTIVATIONS[name]
    y = fn(T(np.linspace(-2, 2, 5), requires_grad=False))
    assert y.creator.cache is None and not y.creator.requires_grad  # recorded as in SINGA


@pytest.mark.parametrize(
    "op", [act.ReLU(), act.Sigmoid(), act.Gelu(), act.Elu(), act.SoftMax(0), act.HardSigmoid()]
)
def test_op_caches_only_when_recording(op):
    op(T(np.linspace(-2, 2, 5), requires_grad=False))
    assert op.cache is None


def test_gradients_at_kinks_follow_pytorch():
    x = T(np.array([-1.0, 0.0, 1.0]))
    np.testing.assert_array_equal(grad_of(autograd.relu(x), x), [0.0, 0.0, 1.0])
    x = T(np.array([-1.0, 0.0, 1.0]))
    np.testing.assert_allclose(grad_of(autograd.leakyrelu(x, 0.1), x), [0.1, 0.1, 1.0])
    x = T(np.array([-1.0, 0.0, 1.0]))
    np.testing.assert_allclose(grad_of(autograd.elu(x, 2.0), x), [2 * np.exp(-1.0), 2.0, 1.0])
    # hardsigmoid: slope alpha strictly inside (0, 1), 0 at and beyond the corners
    x = T(np.array([-3.0, -2.5, 0.0, 2.5, 3.0]))
    np.testing.assert_allclose(grad_of(autograd.hardsigmoid(x), x), [0.0, 0.0, 0.2, 0.0, 0.0])


def test_extreme_inputs_are_finite_and_silent():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for dtype in (np.float64, np.float32):
            big = np.finfo(dtype).max / 4
            x = T(np.array([-big, -1000.0, -40.0, 0.0, 40.0, 1000.0, big], dtype))
            for fn in [autograd.sigmoid, autograd.softplus, autograd.tanh, autograd.elu, autograd.selu]:
                y = fn(x)
                assert np.isfinite(y.to_numpy()[1:-1]).all(), fn
                g = grad_of(y, x)
                assert np.isfinite(g).all(), fn
            y = autograd.gelu(x)
            assert np.isfinite(y.to_numpy()).all()
            assert np.isfinite(grad_of(y, x)).all()
    s = autograd.sigmoid(T(np.array([-1000.0, -40.0, 40.0, 1000.0]))).to_numpy()
    np.testing.assert_allclose(s, [0.0, _sig(-40.0), 1.0, 1.0], rtol=1e-15)
    assert s[1] > 0  # relative accuracy in the lower tail (4e-18), not rounded to 0
    sp = autograd.softplus(T(np.array([-1000.0, 1000.0]))).to_numpy()
    np.testing.assert_array_equal(sp, [0.0, 1000.0])


def test_relu_of_infinities_and_nan():
    y = autograd.relu(T(np.array([-np.inf, np.inf, np.nan], np.float32))).to_numpy()
    np.testing.assert_array_equal(y, [0.0, np.inf, np.nan])


def test_gelu_matches_math_erf_including_tails():
    x = np.concatenate([np.linspace(-12, 12, 481), [-40.0, -38.0, 38.0, 0.0, 1e-8, -1e-8]])
    want = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x])
    got = autograd.gelu(T(x, False)).to_numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)
    # derivative Phi(x) + x phi(x)
    tx = T(x)
    dwant = np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in x])
    dwant += x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    np.testing.assert_allclose(grad_of(autograd.gelu(tx), tx), dwant, rtol=1e-12, atol=1e-300)


def test_erf_max_error_below_1e_minus_7():
    x = np.concatenate([np.linspace(-7, 7, 28001), np.logspace(-300, 1, 300), -np.logspace(-300, 1, 300)])
    want = _erf(x)
    got = act.erf(x)
    assert got.dtype == np.float64
    assert np.abs(got - want).max() < 1e-15
    tiny = np.abs(x) < 1e-3
    np.testing.assert_allclose(got[tiny], want[tiny], rtol=1e-15)  # relative accuracy near 0
    np.testing.assert_array_equal(act.erf(np.array([np.inf, -np.inf, 0.0])), [1.0, -1.0, 0.0])
    assert np.isnan(act.erf(np.array([np.nan])))[0]
    got32 = act.erf(x.astype(np.float32))
    assert got32.dtype == np.float32
    assert np.abs(got32 - want).max() < 1e-6


def test_gelu_float16_is_computed_in_float32():
    x = np.linspace(-4, 4, 9).astype(np.float16)
    tx = T(x)
    y = autograd.gelu(tx)
    assert y.dtype == np.float16
    ref = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(np.float64)])
    np.testing.assert_allclose(y.to_numpy().astype(np.float64), ref, rtol=2e-3, atol=1e-3)
    assert grad_of(y, tx).dtype == np.float16


def test_gelu_rejects_unknown_approximation():
    with pytest.raises(ValueError, match="gelu: approximate"):
        autograd.gelu(T(np.ones(2)), approximate="erf")


def _softmax_ref(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2, -3])
def test_softmax_and_log_softmax_any_axis(axis):
    x = np.random.default_rng(5).standard_normal((2, 3, 4)) * 3
    gradcheck(lambda t: autograd.softmax(t, axis), [x])
    gradcheck(lambda t: autograd.log_softmax(t, axis), [x])
    p = autograd.softmax(T(x, False), axis).to_numpy()
    np.testing.assert_allclose(p, _softmax_ref(x, axis), rtol=1e-14)
    np.testing.assert_allclose(p.sum(axis=axis), 1.0, rtol=1e-15)
    lp = autograd.log_softmax(T(x, False), axis).to_numpy()
    np.testing.assert_allclose(lp, np.log(_softmax_ref(x, axis)), rtol=1e-12)


def test_softmax_default_axis_is_1_and_2d_gradcheck():
    x = np.random.default_rng(6).standard_normal((3, 5))
    np.testing.assert_allclose(autograd.softmax(T(x, False)).to_numpy(), _softmax_ref(x, 1), rtol=1e-14)
    np.testing.assert_allclose(
        autograd.log_softmax(T(x, False)).to_numpy(), np.log(_softmax_ref(x, 1)), rtol=1e-13
    )
    y = np.random.default_rng(7).standard_normal((4, 3, 2))
    np.testing.assert_allclose(autograd.softmax(T(y, False)).to_numpy(), _softmax_ref(y, 1), rtol=1e-14)
    gradcheck(autograd.softmax, [x])
    gradcheck(autograd.log_softmax, [x])
    assert autograd.softmax(T(x)).creator.axis == 1
    assert autograd.softmax(T(x), -1).creator.axis == 1


def test_softmax_is_stable_for_large_logits_and_keeps_float32():
    x = np.array([[1000.0, 0.0, -1000.0], [-1e30, 1e30, 0.0]], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = autograd.softmax(T(x, False)).to_numpy()
        lp = autograd.log_softmax(T(x, False), axis=-1).to_numpy()
    assert p.dtype == np.float32 and lp.dtype == np.float32
    np.testing.assert_array_equal(p, [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    np.testing.assert_allclose(lp[0], [0.0, -1000.0, -2000.0])
    tx = T(x)
    g = grad_of(autograd.log_softmax(tx), tx, dy=np.ones(x.shape, np.float32))
    assert g.dtype == np.float32 and np.isfinite(g).all()


@pytest.mark.parametrize("fn", [autograd.softmax, autograd.log_softmax])
def test_softmax_axis_out_of_range(fn):
    with pytest.raises(ValueError, match=r"axis 3 is out of range for x of shape \(2, 3\)"):
        fn(T(np.ones((2, 3))), 3)
    with pytest.raises(ValueError, match="out of range"):
        fn(T(np.ones((2, 3))), -3)


def test_hyperparameters_are_attributes():
    x = T(np.ones(3))
    assert autograd.leakyrelu(x, 0.2).creator.a == 0.2
    assert autograd.elu(x, 0.7).creator.alpha == 0.7
    op = autograd.selu(x, 1.5, 1.1).creator
    assert (op.alpha, op.gamma) == (1.5, 1.1)
    op = autograd.hardsigmoid(x, 0.3, 0.4).creator
    assert (op.alpha, op.beta) == (0.3, 0.4)
    assert autograd.gelu(x, "tanh").creator.approximate == "tanh"
    assert autograd.log_softmax(T(np.ones((2, 3, 4))), -2).creator.axis == 1


def test_backward_does_not_modify_dy():
    x = np.random.default_rng(8).standard_normal((3, 4))
    for name, (fn, _, _) in ACTIVATIONS.items():
        y = fn(T(x))
        dy = np.random.default_rng(9).standard_normal(y.shape)
        keep = dy.copy()
        y.creator.backward(dy)
        np.testing.assert_array_equal(dy, keep, err_msg=name)
    for fn in [autograd.softmax, autograd.log_softmax]:
        y = fn(T(x))
        dy = np.ones(y.shape)
        y.creator.backward(dy)
        np.testing.assert_array_equal(dy, 1.0)


@pytest.mark.parametrize("name", act.__all__)
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_])
def test_integer_and_bool_inputs_raise_naming_op_and_dtype(name, dtype):
    x = T(np.ones((2, 3)), requires_grad=False, dtype=dtype)
    with pytest.raises(ValueError, match=rf"^{name}: .*floating-point.*{np.dtype(dtype)}"):
        _call(name, x)


def _call(name, x):
    """The activation ``name`` applied to x (prelu with a slope of x's dtype)."""
    if name == "prelu":
        return autograd.prelu(x, T(np.full(x.shape[-1:], 0.25), requires_grad=False, dtype=x.dtype))
    return getattr(autograd, name)(x)


@pytest.mark.parametrize("name", act.__all__)
def test_float16_inputs_are_accepted(name):
    y = _call(name, T(np.linspace(-2, 2, 6).reshape(2, 3), requires_grad=False, dtype=np.float16))
    assert y.dtype == np.float16


def test_hardsigmoid_gamma_and_its_beta_alias():
    x = T(np.linspace(-3, 3, 7))
    want = np.clip(0.3 * np.linspace(-3, 3, 7) + 0.4, 0, 1)
    for y in (
        autograd.hardsigmoid(x, 0.3, 0.4),
        autograd.hardsigmoid(x, alpha=0.3, gamma=0.4),
        autograd.hardsigmoid(x, alpha=0.3, beta=0.4),
        autograd.hardsigmoid(x, 0.3, 0.4, beta=0.4),
    ):
        np.testing.assert_allclose(y.to_numpy(), want)
        assert y.creator.beta == 0.4
    with pytest.raises(ValueError, match="hardsigmoid: gamma=0.1 and beta=0.4"):
        autograd.hardsigmoid(x, gamma=0.1, beta=0.4)


# ----- prelu ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("xs", "ss"), [((2, 3, 4, 5), (3, 1, 1)), ((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 4), ())]
)
def test_prelu_values_and_gradients(xs, ss):
    rng = np.random.default_rng(6)
    x = rng.uniform(0.1, 2, xs) * rng.choice([-1, 1], xs)
    s = rng.uniform(-0.5, 0.5, ss)
    y = autograd.prelu(T(x), T(s))
    np.testing.assert_allclose(y.to_numpy(), np.where(x > 0, x, x * s), rtol=1e-15)
    gradcheck(autograd.prelu, [x, s])


def test_prelu_singa_class_and_gradient_at_zero():
    x, s = T(np.array([-2.0, 0.0, 3.0])), T(np.array([0.25]))
    y = autograd.PRelu()(x, s)[0]
    dx, ds = y.creator.backward(np.ones(3))
    np.testing.assert_array_equal(dx, [0.25, 0.25, 1.0])  # slope at 0, as leakyrelu and PyTorch
    np.testing.assert_array_equal(ds, [-2.0])


def test_prelu_shapes_broadcast_both_ways_as_singa():
    rng = np.random.default_rng(11)
    x = rng.uniform(0.1, 1, (1, 4, 1, 6)) * rng.choice([-1, 1], (1, 4, 1, 6))
    s = rng.uniform(0, 1, (3, 1, 5, 6))
    y = autograd.prelu(T(x), T(s))
    np.testing.assert_allclose(y.to_numpy(), np.where(x > 0, x, x * s))
    gradcheck(autograd.prelu, [x, s])
    with pytest.raises(ValueError, match=r"^prelu: shapes of x \(4,\) and slope \(3,\) do not broadcast"):
        autograd.prelu(T(np.ones(4)), T(np.ones(3)))
    with pytest.raises(ValueError, match=r"^prelu: needs inputs of one dtype"):
        autograd.prelu(T(np.ones(4)), T(np.ones(4), dtype=np.float32))


# ----- ReLU's CPU kernels: numpy's bits, any memory layout, any worker count --------------
def _relu_edge_values(shape, dtype):
    a = np.random.default_rng(4).standard_normal(shape).astype(dtype)
    a.flat[:8] = [-0.0, 0.0, np.nan, -np.nan, np.inf, -np.inf, 1e-30, -1e-30]
    return a


def _bits(a):
    return np.ascontiguousarray(a).tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.float16])
@pytest.mark.parametrize("layout", ["nchw", "nhwc", "strided"])
def test_relu_kernels_give_numpys_bits_in_any_layout_and_worker_count(monkeypatch, layout, dtype):
    from singa.autograd.activation import ReLU
    from singa.kernels import workers

    monkeypatch.setattr(workers, "PIECE_WORK", 64)  # several pieces
    base = (
        _relu_edge_values((4, 3, 6, 6), dtype)
        if dtype != np.int32
        else np.arange(-200, 232).reshape(4, 3, 6, 6)
    )
    x = {
        "nchw": base,
        "nhwc": np.ascontiguousarray(base.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2),
        "strided": base[:, :, ::2],
    }[layout]
    dy = _relu_edge_values(x.shape, np.float32 if dtype == np.int32 else dtype)[::-1]
    with np.errstate(invalid="ignore"):
        want_y, want_dx = np.maximum(x, 0), dy * (np.maximum(x, 0) > 0)
    for count in (1, 2):
        monkeypatch.setattr(workers, "_count", [count])
        op = ReLU()
        op.requires_grad = True
        y = op.forward(x)
        assert _bits(y) == _bits(want_y) and y.dtype == want_y.dtype
        assert _bits(op.backward(dy)) == _bits(want_dx)
        # the in-place variants graph replay uses
        xc, dyc = x.copy(), dy.copy()
        assert _bits(op._forward_into_x(xc)) == _bits(want_y)
        assert _bits(op._backward_into_dy(dyc)) == _bits(want_dx)


def test_relu_in_place_on_a_strided_array_writes_through():
    from singa.autograd.activation import ReLU

    full = np.random.default_rng(6).standard_normal((3, 4, 8))
    view = full[:, :, ::2]
    want = np.maximum(view, 0)
    op = ReLU()
    op.requires_grad = False
    out = op._forward_into_x(view)
    assert out is view
    np.testing.assert_array_equal(full[:, :, ::2], want)
