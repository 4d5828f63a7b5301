"""F(4x4, 3x3)'s tile transforms in long passes (singa.kernels.conv_winograd_tiles)."""

import numpy as np
import pytest

from singa.kernels import conv_winograd as wg
from singa.kernels import conv_winograd_tiles as wt


def padded_tiles(x, top, left, th, tw, side, step):
    """The side x side tiles (th, tw, n, side, side, c) of ``x`` (n, H, W, c) zero-padded
    by ``top`` and ``left`` (and as far as needed below and right), ``step`` apart, in
    float64."""
    n, h, w, c = x.shape
    rows, cols = (th - 1) * step + side, (tw - 1) * step + side
    p = np.zeros((n, rows + top, cols + left, c))
    p[:, top : top + h, left : left + w] = x
    rows_of_tiles = [
        [p[:, ty : ty + side, tx : tx + side] for tx in range(0, tw * step, step)]
        for ty in range(0, th * step, step)
    ]
    return np.stack(rows_of_tiles)


@pytest.mark.parametrize(
    "n, h, w, c, pads",
    [(2, 9, 11, 8, (1, 1)), (3, 8, 8, 16, (0, 0)), (1, 5, 13, 4, (2, 2)), (2, 12, 6, 3, (2, 0))],
)
def test_input_tiles_are_bt_d_b(n, h, w, c, pads):
    """V = B^T d B of every 6x6 tile (overlapping by two, the grid overhanging the input),
    against the matrices in float64."""
    rng = np.random.default_rng(h * w + c)
    top, left = pads
    th, tw = -(-(h + 2 * top - 2) // 4), -(-(w + 2 * left - 2) // 4)
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    bt = wg.matrices(3)[2]
    want = np.einsum("ki,lj,yxnijc->klnyxc", bt, bt, padded_tiles(x, top, left, th, tw, 6, 4))
    v = wt.input_tiles(x, top, left, th, tw)
    assert v.shape == (36, n * th * tw, c) and v.dtype == np.float32
    np.testing.assert_allclose(v.reshape(want.shape), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("n, h, w, c", [(2, 8, 8, 16), (3, 9, 6, 5), (1, 4, 13, 32)])
def test_grad_tiles_are_a_dy_at(n, h, w, c):
    """dM = A dY A^T of every disjoint 4x4 block (zero beyond the edge), against the
    matrices in float64."""
    rng = np.random.default_rng(h * w + c)
    th, tw = -(-h // 4), -(-w // 4)
    dy = rng.standard_normal((n, h, w, c)).astype(np.float32)
    at = wg.matrices(3)[0]
    want = np.einsum("ip,jq,yxnijc->pqnyxc", at, at, padded_tiles(dy, 0, 0, th, tw, 4, 4))
    dm = wt.grad_tiles(dy, th, tw)
    assert dm.shape == (36, n * th * tw, c) and dm.dtype == np.float32
    np.testing.assert_allclose(dm.reshape(want.shape), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_any_memory_layout_gives_the_same_bits():
    """A strided (NCHW-memory) input is the same tiles, bit for bit, as a contiguous one."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 16, 8, 8)).astype(np.float32)  # NCHW memory
    xh, contiguous = x.transpose(0, 2, 3, 1), np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    assert np.array_equal(wt.input_tiles(xh, 1, 1, 2, 2), wt.input_tiles(contiguous, 1, 1, 2, 2).copy())
    assert np.array_equal(wt.grad_tiles(xh, 2, 2), wt.grad_tiles(contiguous, 2, 2).copy())


@pytest.mark.parametrize("n, oh, ow, o", [(2, 8, 8, 16), (3, 9, 6, 5), (1, 5, 13, 32)])
def test_output_tiles_are_at_m_a_cropped(n, oh, ow, o):
    """Y = A^T M A of every tile's products, the 4x4 blocks laid side by side and cropped
    to the output, against the matrices in float64; every pixel written."""
    rng = np.random.default_rng(oh * ow + o)
    th, tw = -(-oh // 4), -(-ow // 4)
    prod = rng.standard_normal((36, n * th * tw, o)).astype(np.float32)
    at = wg.matrices(3)[0]
    blocks = np.einsum("ik,jl,klnyxc->nyixjc", at, at, prod.reshape(6, 6, n, th, tw, o).astype(np.float64))
    want = blocks.reshape(n, th * 4, tw * 4, o)[:, :oh, :ow]
    y = np.full((n, oh, ow, o), np.nan, np.float32)
    wt.output_tiles(prod, th, tw, y)
    assert not np.isnan(y).any()
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize(
    "n, h, w, c, pads",
    [(2, 9, 11, 8, (1, 1)), (3, 8, 8, 16, (0, 0)), (1, 5, 13, 4, (2, 2)), (2, 12, 6, 3, (2, 0))],
)
def test_input_grad_adds_b_dv_bt_over_the_overlaps(n, h, w, c, pads):
    """dx = the sum over tiles of B dV B^T, placed at the tiles' padded positions
    (overlapping by two) and cropped to the input, against the matrices in float64; it
    is the adjoint of :func:`input_tiles` (<V(x), dV> = <x, dx>)."""
    rng = np.random.default_rng(h * w + c + 1)
    top, left = pads
    th, tw = -(-(h + 2 * top - 2) // 4), -(-(w + 2 * left - 2) // 4)
    dv = rng.standard_normal((36, n * th * tw, c)).astype(np.float32)
    bt = wg.matrices(3)[2]
    tiles = np.einsum("ki,lj,klnyxc->nyxijc", bt, bt, dv.reshape(6, 6, n, th, tw, c).astype(np.float64))
    padded = np.zeros((n, th * 4 + 2, tw * 4 + 2, c))
    for ty in range(th):
        for tx in range(tw):
            padded[:, 4 * ty : 4 * ty + 6, 4 * tx : 4 * tx + 6] += tiles[:, ty, tx]
    want = padded[:, top : top + h, left : left + w]
    dx = np.full((n, h, w, c), np.nan, np.float32)
    wt.input_grad(dv, th, tw, top, left, dx)
    np.testing.assert_allclose(dx, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    v = wt.input_tiles(x, top, left, th, tw).astype(np.float64)
    np.testing.assert_allclose(
        np.vdot(v, dv.astype(np.float64)), np.vdot(x.astype(np.float64), want), rtol=1e-4
    )
