"""singa.kernels.conv_epilogue: the steps a convolution applies to each batch slice."""

import numpy as np
import pytest

from singa.autograd.activation import ReLU
from singa.autograd.pooling import MaxPool2d
from singa.kernels.conv_epilogue import Epilogue


def _relu_then_pool(y: np.ndarray, window: tuple) -> np.ndarray:
    """The unfused operators on NHWC rows y (N, H, W, C): ReLU, then MaxPool2d."""
    relu = ReLU()
    relu.requires_grad = False
    kh, kw, sh, sw = window
    pool = MaxPool2d((kh, kw), (sh, sw), (0, 0, 0, 0))
    pool.requires_grad = False
    return pool.forward(relu.forward(y.transpose(0, 3, 1, 2)))


@pytest.mark.parametrize("window", [(2, 2, 2, 2), (3, 3, 2, 2)])
def test_relu_with_a_pool_gives_the_operators_bits_on_zero_signs_nan_and_negatives(window):
    rng = np.random.default_rng(3)
    n, h, w, c = 3, 6, 6, 5
    y = rng.standard_normal((n, h, w, c)).astype(np.float32)
    y[0, :2, :2, 0] = [[-0.0, -1.0], [-2.0, -3.0]]  # a window of nothing above zero, -0.0 first
    y[0, :2, :2, 1] = [[-0.0, -0.0], [-0.0, -0.0]]
    y[1, :2, :2, 2] = [[np.nan, -1.0], [5.0, 0.0]]
    y[2] = -np.abs(y[2])  # a whole sample below zero
    want = _relu_then_pool(y.copy(), window)
    epi = Epilogue(np, (n, h, w, c), np.float32, relu=True, pool=window)
    rows = y.copy().reshape(n * h * w, c)
    epi(rows[: 2 * h * w], 0, 2)  # two slices, as the workers make them
    epi(rows[2 * h * w :], 2, 3)
    got = epi.output(rows)
    assert got.shape == want.shape and np.isnan(want).any() and (want == 0).any()
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))  # +0, never -0, where ReLU made 0
