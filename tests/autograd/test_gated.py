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
