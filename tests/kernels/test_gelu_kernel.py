"""The compiled exact GELU (singa.kernels.gelu) equals the array expression it replaces
(x * Phi(x) with the vectorised erf of singa.autograd.activation) and PyTorch's float64
GELU where installed, through the lower tail; its gradient passes the float64 check."""

import math

import numpy as np
import pytest

from singa import autograd, tensor
from singa.autograd import activation
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor


def test_kernel_equals_the_array_expression():
    x = np.concatenate([np.linspace(-40, 10, 2001), np.random.default_rng(0).standard_normal(1000) * 3])
    got = autograd.gelu(Tensor(data=x, dtype=np.float64)).to_numpy()
    want = x * activation._normal_cdf(x)  # the numpy path (still used for float16 and GPU arrays)
    body = x > -8  # beyond, the array expression's tail is cut at erfc(27) and less exact
    np.testing.assert_allclose(got[body], want[body], rtol=1e-13, atol=1e-300)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)
    x32 = x.astype(np.float32)
    got32 = autograd.gelu(Tensor(data=x32)).to_numpy()
    assert got32.dtype == np.float32
    np.testing.assert_allclose(
        got32,
        (x32.astype(np.float64) * activation._normal_cdf(x32.astype(np.float64))).astype(np.float32),
        rtol=1e-6,
        atol=1e-38,
    )
    try:  # PyTorch's float64 GELU is (1 + erf) / 2: it cancels in the far lower tail
        import torch
    except Exception:
        return
    ref = torch.nn.functional.gelu(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got[x > -3], ref[x > -3], rtol=1e-12, atol=1e-300)


def test_kernel_tail_against_exact_values():
    # x * erfc(-x / sqrt 2) / 2 to 20 digits (mpmath, 50-digit arithmetic)
    exact = {
        -10.0: -7.619853024160526066e-23,
        -20.0: -5.5072482372124673902e-88,
        -30.0: -1.4720141781444561179e-196,
    }
    x = np.array(list(exact))
    got = autograd.gelu(Tensor(data=x, dtype=np.float64)).to_numpy()
    np.testing.assert_allclose(got, list(exact.values()), rtol=1e-12)  # x / sqrt 2 rounds: ~2x^2 ulp


@pytest.mark.parametrize("dtype", [np.float64])
def test_kernel_gradient(dtype):
    x = np.random.default_rng(1).standard_normal((3, 5)).astype(dtype) * 3
    gradcheck(autograd.gelu, [x])


def test_kernel_on_views_and_scalars():
    x = np.random.default_rng(2).standard_normal((4, 6))
    t = x.T  # not C-contiguous
    np.testing.assert_allclose(
        autograd.gelu(Tensor(data=t, dtype=np.float64)).to_numpy(), t * activation._normal_cdf(t), rtol=1e-13
    )
    gradcheck(autograd.gelu, [np.asarray(0.7)])
    gradcheck(lambda a: autograd.gelu(autograd.transpose(a, (1, 0))), [x])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf_kernel_against_libm_and_the_array_expression(dtype):
    """Erf's compiled kernel: libm's erf in float64, rounded once (within an ulp of
    Python's math.erf) and equal to the rational array expression to 1e-15."""
    from singa.autograd.activation import erf as erf_expression
    from singa.kernels.gelu import erf_values

    x = np.linspace(-7, 7, 2001).astype(dtype)
    y = np.empty_like(x)
    erf_values(x, y)
    want = np.array([math.erf(float(v)) for v in x]).astype(dtype)
    np.testing.assert_array_max_ulp(y, want, maxulp=1)
    np.testing.assert_allclose(
        y, erf_expression(x.astype(np.float64)), rtol=0, atol=1e-15 if dtype == np.float64 else 1e-7
    )
    got = autograd.erf(tensor.from_numpy(x)).to_numpy()
    np.testing.assert_array_equal(got, y)


def test_float32_kernels_within_two_ulp_of_the_float64_path():
    """float32 arrays take the vectorised kernels (a Chebyshev erfc and a bit-built exp):
    their forward is within 2 ulp of the float64 kernel rounded once, over the whole line
    including the lower tail down to float32's subnormals, and so is the gradient
    (relative 1e-6, absolute 2e-7 where the gradient crosses zero)."""
    from singa.kernels.gelu import gelu_exact, gelu_exact_grad, gelu_float32, gelu_float32_grad

    x = np.linspace(-14, 14, 400_001).astype(np.float32)
    y32, c32 = np.empty_like(x), np.empty_like(x)
    gelu_float32(x, c32, y32)
    x64 = x.astype(np.float64)
    y64, c64 = np.empty_like(x64), np.empty_like(x64)
    gelu_exact(x64, c64, y64)
    want = y64.astype(np.float32)
    np.testing.assert_array_max_ulp(y32, want, maxulp=2)
    np.testing.assert_array_max_ulp(c32, c64.astype(np.float32), maxulp=2)
    dy = np.random.default_rng(3).standard_normal(x.size).astype(np.float32)
    d32, d64 = np.empty_like(x), np.empty_like(x64)
    gelu_float32_grad(dy, x, c32, d32)
    gelu_exact_grad(dy.astype(np.float64), x64, c64, d64)
    np.testing.assert_allclose(d32, d64, rtol=1e-6, atol=2e-7)
    got = autograd.gelu(Tensor(data=x[::7].copy())).to_numpy()  # the operator picks them
    np.testing.assert_array_equal(got, y32[::7])


def test_float32_helpers_against_libm():
    """The scalar pieces: exp to 1e-9 relative over [-700, 700], erfc to 1.2e-7 relative
    over the line (its fit's stated bound), both as plain Python functions."""
    from singa.kernels.gelu import erfc_for_float32, exp_for_float32

    for a in np.linspace(-700, 700, 20_001):
        assert abs(exp_for_float32(float(a)) / math.exp(a) - 1) < 1e-9, a
    for u in np.linspace(-6, 26, 20_001):
        assert abs(erfc_for_float32(float(u)) / math.erfc(u) - 1) < 1.2e-7, u
