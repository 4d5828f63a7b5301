"""The backward of 3x3 stride-1 training convolutions as Winograd F(4x4, 3x3)
(singa.kernels.conv_winograd_grad)."""

import numpy as np
import pytest

from singa.autograd.conv import Conv2d
from singa.kernels import conv_forward, workers
from singa.kernels import conv_winograd_grad as wgg


def grads64(x, W, dy, pads):
    """float64 (dx, dW) of the 3x3 stride-1 correlation of ``x`` padded by ``pads``."""
    t, l, b, r = pads
    xp = np.pad(np.asarray(x, np.float64), ((0, 0), (0, 0), (t, b), (l, r)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # N, C, OH, OW, 3, 3
    dy64, W64 = np.asarray(dy, np.float64), np.asarray(W, np.float64)
    dW = np.einsum("nohw,nchwij->ocij", dy64, win)
    dxp = np.zeros_like(xp)
    oh, ow = dy.shape[2:]
    for i in range(3):
        for j in range(3):
            dxp[:, :, i : i + oh, j : j + ow] += np.einsum("nohw,oc->nchw", dy64, W64[:, :, i, j])
    return dxp[:, :, t : t + x.shape[2], l : l + x.shape[3]], dW


def nhwc(a):
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def case(n, c, o, h, w, pads, seed=0):
    rng = np.random.default_rng(seed)
    x = nhwc(rng.standard_normal((n, c, h, w)).astype(np.float32))
    W = (rng.standard_normal((o, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    oh, ow = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
    dy = nhwc(rng.standard_normal((n, o, oh, ow)).astype(np.float32))
    return x, W, dy


SHAPES = [
    (2, 16, 24, 8, 8, (1, 1, 1, 1)),  # ResNet's "same" 3x3
    (3, 16, 16, 7, 9, (1, 0, 2, 1)),  # outputs not a multiple of the tile, uneven pads
    (5, 32, 16, 12, 12, (0, 0, 0, 0)),  # "valid"
    (2, 16, 16, 10, 6, (2, 2, 2, 2)),  # padded by r - 1
]


@pytest.mark.parametrize("n, c, o, h, w, pads", SHAPES)
def test_gradients_match_a_float64_convolution(n, c, o, h, w, pads):
    x, W, dy = case(n, c, o, h, w, pads)
    dx, dW = wgg.backward(dy, x, W, pads)
    want_dx, want_dW = grads64(x, W, dy, pads)
    assert dx.shape == x.shape and dW.shape == W.shape and dx.dtype == dW.dtype == np.float32
    np.testing.assert_allclose(dx, want_dx, rtol=1e-5, atol=1e-5 * np.abs(want_dx).max())
    np.testing.assert_allclose(dW, want_dW, rtol=1e-5, atol=1e-5 * np.abs(want_dW).max())


def test_either_gradient_alone_is_the_same():
    x, W, dy = case(3, 16, 16, 8, 8, (1, 1, 1, 1), seed=2)
    dx, dW = wgg.backward(dy, x, W, (1, 1, 1, 1))
    dx_only, none_w = wgg.backward(dy, None, W, (1, 1, 1, 1))
    none_x, dW_only = wgg.backward(dy, x, None, (1, 1, 1, 1))
    assert none_w is None and none_x is None
    np.testing.assert_array_equal(dx_only, dx)
    np.testing.assert_array_equal(dW_only, dW)


def test_bits_do_not_depend_on_the_worker_count():
    x, W, dy = case(40, 16, 16, 16, 16, (1, 1, 1, 1), seed=3)  # several batch slices
    outs = []
    try:
        for count in (1, 2):
            workers.set_worker_count(count)
            outs.append([g.copy() for g in wgg.backward(dy, x, W, (1, 1, 1, 1))])
    finally:
        workers.set_worker_count(None)
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


GEOMETRY = dict(kernel_size=(3, 3), stride=(1, 1), pads=(1, 1, 1, 1), dilation=(1, 1), groups=1)


@pytest.mark.parametrize(
    "why, dy_shape, x_shape, change",
    [
        ("float64 stays the columns'", (8, 16, 8, 8), (8, 16, 8, 8), dict(dtype=np.float64)),
        ("stride 2", (8, 16, 4, 4), (8, 16, 8, 8), dict(stride=(2, 2))),
        ("dilation", (8, 16, 8, 8), (8, 16, 8, 8), dict(dilation=(2, 2))),
        ("grouped", (8, 16, 8, 8), (8, 16, 8, 8), dict(groups=2)),
        ("5x5 filters", (8, 16, 8, 8), (8, 16, 8, 8), dict(kernel_size=(5, 5))),
        ("few channels", (8, 8, 8, 8), (8, 8, 8, 8), {}),
        ("too few tiles for the filters", (2, 64, 8, 8), (2, 64, 8, 8), {}),
        ("padding past 2", (8, 16, 12, 12), (8, 16, 8, 8), dict(pads=(3, 3, 3, 3))),
    ],
)
def test_backward_is_left_to_the_columns(why, dy_shape, x_shape, change):
    change = dict(change)
    dtype = change.pop("dtype", np.float32)
    geo = {**GEOMETRY, **change}
    w_shape = (dy_shape[1], x_shape[1] // geo["groups"], *geo["kernel_size"])
    assert not wgg.applies(np.zeros(dy_shape, dtype), x_shape, w_shape, geo), why


def test_the_switch_turns_it_off(monkeypatch):
    dy = np.zeros((8, 16, 8, 8), np.float32)
    assert wgg.applies(dy, (8, 16, 8, 8), (16, 16, 3, 3), GEOMETRY)
    monkeypatch.setenv("SINGA_WINOGRAD_TRAINING", "0")
    assert not wgg.applies(dy, (8, 16, 8, 8), (16, 16, 3, 3), GEOMETRY)


def test_the_operators_backward_runs_it_and_db_stays_exact():
    x, W, dy = case(8, 16, 16, 8, 8, (1, 1, 1, 1), seed=4)
    b = np.zeros(16, np.float32)
    op = Conv2d((3, 3), pads=(1, 1, 1, 1), bias=True)
    op.requires_grad, op.needs_grad = True, (True, True, True)
    y, op.cache = conv_forward.forward_saving(x, W, b, keep=(True, True), **op.geometry())
    dx, dW, db = op.backward(dy)
    want_dx, want_dW = wgg.backward(dy, x, W, (1, 1, 1, 1))
    np.testing.assert_array_equal(dx, want_dx)
    np.testing.assert_array_equal(dW, want_dW)
    np.testing.assert_allclose(db, np.asarray(dy, np.float64).sum(axis=(0, 2, 3)), rtol=1e-5)
