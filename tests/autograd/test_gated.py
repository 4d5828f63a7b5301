"""Self-gated activations: silu against its formula (and PyTorch where installed),
float64 gradient check, extreme values, float16 and errors."""

import numpy as np
import pytest

from singa import autograd
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor


def const(a):
    a = np.asarray(a)
    return Tensor(data=a, dtype=a.dtype, requires_grad=False)


def test_silu_forward_formula_and_extremes():
    x = np.linspace(-30, 30, 61)
    np.testing.assert_allclose(autograd.silu(const(x)).to_numpy(), x / (1 + np.exp(-x)), rtol=1e-13)
    big = np.array([-1e4, -800.0, 800.0, 1e4], np.float32)
    y = autograd.silu(const(big)).to_numpy()
    assert np.isfinite(y).all()
    np.testing.assert_array_equal(y, [-0.0, -0.0, 800.0, 1e4])


def test_silu_gradcheck_and_float16():
    x = np.random.default_rng(0).standard_normal((3, 4)) * 3
    gradcheck(autograd.silu, [x])
    h = x.astype(np.float16)
    y = autograd.silu(const(h)).to_numpy()
    assert y.dtype == np.float16
    np.testing.assert_allclose(y, h / (1 + np.exp(-h.astype(np.float64))), rtol=2e-3, atol=1e-3)


def test_silu_and_gelu_match_torch():
    try:
        import torch
        import torch.nn.functional as F
    except Exception:
        pytest.skip("torch is not importable")
    x = np.random.default_rng(1).standard_normal(50).astype(np.float32) * 4
    np.testing.assert_allclose(
        autograd.silu(const(x)).to_numpy(), F.silu(torch.from_numpy(x)).numpy(), rtol=1e-6
    )
    for approx in (
        "none",
        "tanh",
    ):  # PyTorch's float32 GELU cancels in the lower tail: its float64 is the judge
        want = F.gelu(torch.from_numpy(x).double(), approximate=approx).numpy()
        np.testing.assert_allclose(autograd.gelu(const(x), approx).to_numpy(), want, rtol=1e-5, atol=3e-7)


def test_silu_rejects_integers():
    with pytest.raises(ValueError, match="silu"):
        autograd.silu(const(np.arange(3)))


def _hardswish_ref(x):
    return x * np.clip(x + 3, 0, 6) / 6


def _mish_ref(x):
    return x * np.tanh(np.log1p(np.exp(x)))


def test_hardswish_forward_formula_and_pieces():
    x = np.linspace(-6, 6, 49)  # includes -3, 0 and 3
    y = autograd.hardswish(const(x)).to_numpy()
    np.testing.assert_allclose(y, _hardswish_ref(x), rtol=1e-15, atol=0)
    assert (y[x <= -3] == 0).all() and (y[x >= 3] == x[x >= 3]).all()
    np.testing.assert_array_equal(autograd.hardswish(const(np.array([1.0]))).to_numpy(), [4 / 6])


def test_hardswish_gradcheck_away_from_the_corners_and_the_gradient_pieces():
    x = np.array([[-5.0, -2.5, -1.0, 0.3], [1.7, 2.9, 4.0, -3.5]])  # no point within 1e-3 of -3 or 3
    gradcheck(autograd.hardswish, [x])
    xs = np.array([-4.0, -3.0, 0.0, 1.5, 3.0, 5.0])
    t = Tensor(data=xs, dtype=xs.dtype, requires_grad=True, stores_grad=True)
    g = autograd.gradients(autograd.hardswish(t), np.ones(6))[t].to_numpy()
    np.testing.assert_array_equal(g, [0.0, -0.5, 0.5, 1.0, 1.5, 1.0])  # PyTorch's: -3 and 3 in the middle


def test_mish_forward_formula_and_extremes():
    x = np.linspace(-20, 20, 81)
    np.testing.assert_allclose(autograd.mish(const(x)).to_numpy(), _mish_ref(x), rtol=1e-13, atol=1e-300)
    big = np.array([-1e4, -200.0, 200.0, 1e4], np.float32)
    y = autograd.mish(const(big)).to_numpy()
    assert np.isfinite(y).all()
    np.testing.assert_array_equal(y, [-0.0, -0.0, 200.0, 1e4])


def test_mish_gradcheck_and_float16():
    x = np.random.default_rng(2).standard_normal((3, 4)) * 3
    gradcheck(autograd.mish, [x])
    h = x.astype(np.float16)
    y = autograd.mish(const(h)).to_numpy()
    assert y.dtype == np.float16
    np.testing.assert_allclose(y, _mish_ref(h.astype(np.float64)), rtol=2e-3, atol=1e-3)


def test_hardswish_and_mish_match_torch():
    try:
        import torch
        import torch.nn.functional as F
    except Exception:
        pytest.skip("torch is not importable")
    x = np.random.default_rng(3).standard_normal(60) * 4
    for ours, theirs in ((autograd.hardswish, F.hardswish), (autograd.mish, F.mish)):
        t = Tensor(data=x.copy(), dtype=x.dtype, requires_grad=True, stores_grad=True)
        y = ours(t)
        g = autograd.gradients(y, np.ones(x.shape))[t].to_numpy()
        tx = torch.from_numpy(x.copy()).requires_grad_()
        ty = theirs(tx)
        ty.sum().backward()
        np.testing.assert_allclose(y.to_numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(g, tx.grad.numpy(), rtol=1e-10, atol=1e-15)


@pytest.mark.parametrize("fn", [autograd.hardswish, autograd.mish])
def test_hardswish_and_mish_reject_integers(fn):
    with pytest.raises(ValueError, match=fn.__name__):
        fn(const(np.arange(3)))
