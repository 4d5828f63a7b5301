"""Winograd convolution F(4x4, r x r) for evaluation and training forwards
(singa.kernels.conv_winograd)."""

import numpy as np
import pytest

from singa.autograd.conv import Conv2d
from singa.kernels import conv_forward, workers
from singa.kernels import conv_winograd as wg
from singa.kernels import conv_winograd_tiles as wt


def conv64(x, W, pads):
    """A float64 reference: the valid correlation of ``x`` (N, C, H, W) zero-padded by
    ``pads`` (top, left, bottom, right) with ``W`` (O, C, r, r), as (N, O, OH, OW)."""
    t, l, b, r = pads
    xp = np.pad(np.asarray(x, np.float64), ((0, 0), (0, 0), (t, b), (l, r)))
    k = W.shape[2]
    win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))  # N, C, OH, OW, k, k
    return np.einsum("nchwij,ocij->nohw", win, np.asarray(W, np.float64))


def operator(r, pads):
    op = Conv2d((r, r), pads=pads, bias=True)
    op.requires_grad = False
    return op


def nhwc(a):
    """``a`` (N, C, H, W) as an NCHW view of NHWC memory (what convolutions output)."""
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


@pytest.mark.parametrize("r", [3, 5])
def test_matrices_compute_the_valid_correlation(r):
    """A^T ((G g) * (B^T d)) is the correlation of d (length 4 + r - 1) with g."""
    at, g, bt = wg.matrices(r)
    a = 4 + r - 1
    assert at.shape == (4, a) and g.shape == (a, r) and bt.shape == (a, a)
    rng = np.random.default_rng(r)
    for _ in range(5):
        d, k = rng.standard_normal(a), rng.standard_normal(r)
        np.testing.assert_allclose(at @ ((g @ k) * (bt @ d)), np.correlate(d, k, "valid"), atol=1e-12)


def test_input_transform_of_f43_is_the_known_integer_matrix():
    """Lavin and Gray's B^T for F(4x4, 3x3) (points 0, +-1, +-2)."""
    want = [
        [4, 0, -5, 0, 1, 0],
        [0, -4, -4, 1, 1, 0],
        [0, 4, -4, -1, 1, 0],
        [0, -2, -1, 2, 1, 0],
        [0, 2, -1, -2, 1, 0],
        [0, 4, 0, -5, 0, 1],
    ]
    np.testing.assert_array_equal(wg.matrices(3)[2], want)


@pytest.mark.parametrize(
    "n, c, o, h, w, r, pads",
    [
        (2, 16, 16, 32, 32, 3, (1, 1, 1, 1)),  # ResNet's 3x3 "same"
        (3, 8, 12, 7, 9, 3, (1, 0, 2, 1)),  # outputs not a multiple of the tile, uneven pads
        (2, 32, 64, 12, 12, 5, (0, 0, 0, 0)),  # the MNIST CNN's second layer
        (1, 9, 8, 13, 10, 5, (2, 2, 2, 2)),
    ],
)
def test_forward_matches_a_float64_convolution(n, c, o, h, w, r, pads):
    rng = np.random.default_rng(0)
    x = nhwc(rng.standard_normal((n, c, h, w)).astype(np.float32))
    W = (rng.standard_normal((o, c, r, r)) / np.sqrt(c * r * r)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    op = operator(r, pads)
    assert wg.suits(op, W)
    U = wg.transform_filters(W)
    assert U.shape == ((4 + r - 1) ** 2, c, o) and U.dtype == np.float32
    assert wg.fits(op, x, U)
    y = wg.forward(op, x, U, b)
    want = conv64(x, W, pads) + b.reshape(1, -1, 1, 1)
    assert y.shape == want.shape == op.output_shape(x.shape, W.shape)
    assert y.dtype == np.float32 and y.transpose(0, 2, 3, 1).flags.c_contiguous  # NHWC memory
    # a few float32 ulps of the outputs' scale (the column product: about 5e-7)
    assert np.abs(y - want).max() <= 2e-5 * np.abs(want).max()


def test_an_input_in_nchw_memory_gives_the_same_bits():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 8, 9, 9)).astype(np.float32)
    W = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    op, U = operator(3, (1, 1, 1, 1)), wg.transform_filters(W)
    np.testing.assert_array_equal(wg.forward(op, x, U), wg.forward(op, nhwc(x), U))


def test_epilogue_steps_match_the_column_product_path():
    """Bias, BatchNorm's affine map, the residual, ReLU and max-pool are applied to the
    Winograd output as the column product (conv_forward.forward) applies them to its own."""
    rng = np.random.default_rng(2)
    n, c, o, h = 3, 8, 16, 12
    x = nhwc(rng.standard_normal((n, c, h, h)).astype(np.float32))
    W = (rng.standard_normal((o, c, 3, 3)) / 5).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    affine = tuple(rng.standard_normal(o).astype(np.float32) for _ in range(3))
    res = nhwc(rng.standard_normal((n, o, h, h)).astype(np.float32))
    op = operator(3, (1, 1, 1, 1))
    kw = dict(relu=True, residual=res, pool=(2, 2, 2, 2), affine=affine)
    want = conv_forward.forward(x, W, b, **op.geometry(), **kw)
    got = wg.forward(op, x, wg.transform_filters(W), b, **kw)
    assert got.shape == want.shape == (n, o, h // 2, h // 2)
    assert (got >= 0).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5 * np.abs(want).max())


def test_bits_do_not_depend_on_the_worker_count():
    rng = np.random.default_rng(3)
    x = nhwc(rng.standard_normal((24, 16, 16, 16)).astype(np.float32))  # several batch slices
    W = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    op, U = operator(3, (1, 1, 1, 1)), wg.transform_filters(W)
    outs = []
    try:
        for count in (1, 2):
            workers.set_worker_count(count)
            outs.append(wg.forward(op, x, U, relu=True).copy())
    finally:
        workers.set_worker_count(None)
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize(
    "why, kw, shape, dtype",
    [
        ("stride 2", dict(stride=(2, 2)), (8, 8, 3, 3), np.float32),
        ("dilation", dict(dilation=(2, 2)), (8, 8, 3, 3), np.float32),
        ("1x1 filters", {}, (8, 8, 1, 1), np.float32),
        ("7x7 filters", {}, (8, 8, 7, 7), np.float32),
        ("few input channels", {}, (8, 3, 3, 3), np.float32),
        ("few output channels", {}, (4, 8, 3, 3), np.float32),
        ("float64", {}, (8, 8, 3, 3), np.float64),
    ],
)
def test_convolutions_it_does_not_take(why, kw, shape, dtype):
    op = Conv2d(shape[2:], pads=(1, 1, 1, 1), **kw)
    assert not wg.suits(op, np.zeros(shape, dtype)), why


def test_groups_are_not_taken():
    op = Conv2d((3, 3), pads=(1, 1, 1, 1), groups=2)
    assert not wg.suits(op, np.zeros((8, 8, 3, 3), np.float32))


def test_inputs_it_does_not_fit():
    op = operator(3, (1, 1, 1, 1))
    U = wg.transform_filters(np.ones((8, 8, 3, 3), np.float32))
    assert wg.fits(op, np.zeros((1, 8, 4, 4), np.float32), U)
    assert not wg.fits(op, np.zeros((1, 8, 3, 8), np.float32), U)  # output smaller than a tile
    assert not wg.fits(op, np.zeros((1, 8, 8, 8), np.float64), U)  # another dtype
    assert not wg.fits(op, np.zeros((1, 4, 8, 8), np.float32), U)  # other channels


@pytest.mark.parametrize("r", [3, 5])
def test_written_out_transforms_apply_the_matrices(r):
    """The compiled transforms (formulas with shared subexpressions) against B^T d B and
    A^T M A with :func:`matrices`, in float64, on a tile grid that overhangs the output."""
    rng = np.random.default_rng(r)
    at, _, bt = wg.matrices(r)
    a = bt.shape[0]
    n, h, w, c, o, pad = 2, 9, 11, 8, 16, (r - 1) // 2
    oh, ow = h + 2 * pad - r + 1, w + 2 * pad - r + 1
    th, tw = -(-oh // 4), -(-ow // 4)
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    phased = np.empty((n, th * 4 + a - 4, 4, tw + 1, c), np.float32)
    wg._phase(x, 4, pad, pad, phased)
    padded = phased.transpose(0, 1, 3, 2, 4).reshape(n, th * 4 + a - 4, -1, c)  # column k*4 + s
    np.testing.assert_array_equal(padded[:, pad : pad + h, pad : pad + w], x)
    border = np.ones(padded.shape[:3], bool)
    border[:, pad : pad + h, pad : pad + w] = False
    assert not padded[border].any()  # zeros around the input
    tiles = np.stack(
        [[padded[:, 4 * ty : 4 * ty + a, 4 * tx : 4 * tx + a] for tx in range(tw)] for ty in range(th)]
    )  # (th, tw, n, a, a, c)
    want_v = np.einsum("ki,lj,yxnijc->klnyxc", bt, bt, tiles.astype(np.float64)).reshape(a * a, -1)
    if r == 3:  # from the slice's long passes (test_conv_winograd_tiles checks them alone)
        v = wt.input_tiles(x, pad, pad, th, tw).reshape(a * a, -1)
    else:
        v = np.empty((a * a, n * th * tw * c), np.float32)
        wg._tiles_in(phased, th, tw, v)
    np.testing.assert_allclose(v, want_v, rtol=1e-5, atol=1e-5 * np.abs(want_v).max())
    prod = rng.standard_normal((a * a, n * th * tw * o)).astype(np.float32)
    blocks = np.einsum("ik,jl,klnyxc->nyixjc", at, at, prod.reshape(a, a, n, th, tw, o).astype(np.float64))
    want_y = blocks.reshape(n, th * 4, tw * 4, o)[:, :oh, :ow]
    y = np.full((n, oh, ow, o), np.nan, np.float32)
    if r == 3:
        wt.output_tiles(prod, th, tw, y)
    else:
        wg._tiles_out(prod, th, tw, y)
    assert not np.isnan(y).any()  # every pixel written, none beyond the crop
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-5 * np.abs(want_y).max())


# ----- the training forward ------------------------------------------------------------------

GEOMETRY = dict(kernel_size=(3, 3), stride=(1, 1), pads=(1, 1, 1, 1), dilation=(1, 1), groups=1)


def training_pair(n=4, c=16, o=32, h=12, seed=5):
    rng = np.random.default_rng(seed)
    x = nhwc(rng.standard_normal((n, c, h, h)).astype(np.float32))
    W = (rng.standard_normal((o, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    return x, W


@pytest.mark.parametrize("r", [3, 5])
def test_training_filters_are_the_float64_transform_to_float32_roundings(r):
    W = np.random.default_rng(r).standard_normal((24, 16, r, r)).astype(np.float32)
    got, want = wg.training_filters(W), wg.transform_filters(W)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


@pytest.mark.parametrize("r", [3, 5])
def test_transposed_training_filters_are_the_backward_layout(r):
    """(a*a, O, C), what the backward's dV = dM U^T reads, from filters of any strides."""
    W = np.random.default_rng(r + 1).standard_normal((12, 20, r, r)).astype(np.float32)
    want = wg.transform_filters(W).transpose(0, 2, 1)
    for filters in (W, np.asfortranarray(W), W.transpose(1, 0, 2, 3).copy().transpose(1, 0, 2, 3)):
        got = wg.training_filters(filters, transposed=True)
        assert got.shape == want.shape and got.flags.c_contiguous
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


def test_filters_transform_bits_do_not_depend_on_the_worker_count(pieces_seen):
    """A bank large enough to be cut in pieces (each filter is one piece's work alone)."""
    W = np.random.default_rng(5).standard_normal((192, 128, 3, 3)).astype(np.float32)
    outs = []
    try:
        for count in (1, 2):
            workers.set_worker_count(count)
            outs.append([wt.filters(W), wt.filters(W, transposed=True)])
    finally:
        workers.set_worker_count(None)
    assert max(len(p) for p in pieces_seen) >= 2
    for one, two in zip(*outs):
        np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(outs[0][0], outs[0][1].transpose(0, 2, 1))
    want = wg.transform_filters(W)
    np.testing.assert_allclose(outs[1][0], want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


@pytest.mark.parametrize(
    "why, x_shape, w_shape, change",
    [
        ("float64 stays exact", (2, 16, 8, 8), (16, 16, 3, 3), dict(dtype=np.float64)),
        ("stride 2", (2, 16, 8, 8), (16, 16, 3, 3), dict(stride=(2, 2))),
        ("dilation", (2, 16, 8, 8), (16, 16, 3, 3), dict(dilation=(2, 2))),
        ("grouped", (2, 16, 8, 8), (16, 8, 3, 3), dict(groups=2)),
        ("few channels", (2, 8, 8, 8), (16, 8, 3, 3), {}),
        ("1x1 filters", (2, 16, 8, 8), (16, 16, 1, 1), dict(kernel_size=(1, 1), pads=(0, 0, 0, 0))),
        ("padding past r - 1", (2, 16, 8, 8), (16, 16, 3, 3), dict(pads=(3, 3, 3, 3))),
        ("output under a tile", (2, 16, 4, 4), (16, 16, 3, 3), dict(pads=(0, 0, 0, 0))),
        ("fewer tiles than half the channels", (2, 64, 4, 4), (64, 64, 3, 3), {}),
    ],
)
def test_training_forward_is_left_to_the_columns(why, x_shape, w_shape, change):
    change = dict(change)
    dtype = change.pop("dtype", np.float32)
    geo = {**GEOMETRY, **change}
    x, W = np.zeros(x_shape, dtype), np.zeros(w_shape, dtype)
    assert not wg.trains(x, W, *geo.values()), why


def test_training_forward_runs_winograd_and_backward_stays_the_columns(monkeypatch):
    x, W = training_pair()
    assert wg.trains(x, W, *GEOMETRY.values())
    keep = (True, True)
    y, saved = conv_forward.forward_saving(x, W, None, keep=keep, **GEOMETRY)
    want = conv64(x, W, GEOMETRY["pads"])
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=2e-5 * np.abs(want).max())
    np.testing.assert_array_equal(y, wg.forward_padded(x, wg.training_filters(W), 3, GEOMETRY["pads"]))
    monkeypatch.setenv("SINGA_WINOGRAD_TRAINING", "0")
    y_cols, saved_cols = conv_forward.forward_saving(x, W, None, keep=keep, **GEOMETRY)
    assert not np.array_equal(y, y_cols)  # another rounding: the switch turns it off
    np.testing.assert_array_equal(y_cols, conv_forward.forward(x, W, None, **GEOMETRY))
    # what the backward gets is the same either way: the gradients do not change
    assert saved[:3] == saved_cols[:3] and saved[3] is saved_cols[3] and saved[4] is saved_cols[4]


def test_evaluation_forward_keeps_the_exact_columns():
    x, W = training_pair()
    y, saved = conv_forward.forward_saving(x, W, None, keep=None, **GEOMETRY)
    assert saved is None
    np.testing.assert_array_equal(y, conv_forward.forward(x, W, None, **GEOMETRY))


def test_training_forward_bits_do_not_depend_on_the_worker_count():
    x, W = training_pair(n=24, seed=7)  # several batch slices
    outs = []
    try:
        for count in (1, 2):
            workers.set_worker_count(count)
            outs.append(conv_forward.forward_saving(x, W, None, keep=(True, True), **GEOMETRY)[0].copy())
    finally:
        workers.set_worker_count(None)
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize(
    "n, tiles, per_sample, budget, want",
    [
        (32, 4, 295_000, 1 << 20, 2),  # ResNet-18's 256 channels on 8x8: 64 tiles a slice, not 32 slices
        (32, 16, 590_000, 1 << 20, 4),  # 128 on 16x16: 128 tiles a slice
        (64, 64, 295_000, 1 << 20, 20),  # ResNet-20's 16 on 32x32: the bytes decide, as before
        (2, 1, 100, 1 << 20, 1),  # small work: one slice
    ],
)
def test_batch_slices_keep_enough_tiles_for_the_products(n, tiles, per_sample, budget, want):
    slices = wg.batch_slices(n, tiles, per_sample, budget)
    assert len(slices) == want
    assert slices[0][0] == 0 and slices[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(slices, slices[1:]))


def test_batch_slices_depend_on_the_shapes_only():
    try:
        workers.set_worker_count(1)
        one = wg.batch_slices(32, 16, 590_000, 1 << 20)
        workers.set_worker_count(2)
        two = wg.batch_slices(32, 16, 590_000, 1 << 20)
    finally:
        workers.set_worker_count(None)
    assert one == two
