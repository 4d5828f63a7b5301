"""conv2d's batch slices on the workers: the same bits with one worker or two, graph
replay bitwise eager, gradients and the weight-gradient partials added in slice order."""

import numpy as np
import pytest
from test_conv import CONFIGS, T, make, pads_of, ref_conv2d

from singa import autograd
from singa.autograd.gradcheck import gradcheck
from singa.kernels import conv_forward, workers
from singa.kernels import conv_slices as slices

# the paths: kernel-major columns (bias row; stride 2 with dx), pixel-major columns
# with dx by col2im (dilated, strided), dx as a stride-1 convolution, padding beyond
# the kernel, a 1x1 kernel
PATHS = [CONFIGS[i] for i in (0, 2, 4, 5, 9, 11, 12)]


def several_slices(monkeypatch, cfg, batch, partials=None, itemsize=8):
    """Slices of one to three samples for ``cfg`` at ``batch``; ``partials`` caps the
    bytes of the weight-gradient partials (runs of several slices)."""
    (_, c, h, w), (_, _, kh, kw) = cfg[0], cfg[1]
    per_sample = c * h * w * kh * kw * itemsize
    monkeypatch.setattr(slices, "_CHUNK_BYTES", 2 * per_sample)
    monkeypatch.setattr(slices, "_SKINNY_CHUNK_BYTES", 2 * per_sample)
    if partials is not None:
        monkeypatch.setattr(slices, "_PARTIALS_BYTES", partials)
    return ((batch, *cfg[0][1:]), *cfg[1:])


def forward_backward(cfg, x, w, b, dy, first_layer=False):
    tx, tw = T(x, not first_layer), T(w)
    tb = None if b is None else T(b)
    y = autograd.conv2d(tx, tw, tb, *cfg[3:])
    g = autograd.gradients(y, dy)
    out = [y.to_numpy(), g[tw].to_numpy()]
    if not first_layer:
        out.append(g[tx].to_numpy())
    if tb is not None:
        out.append(g[tb].to_numpy())
    return out


@pytest.mark.parametrize("partials", [None, 1])
@pytest.mark.parametrize("cfg", PATHS)
def test_one_and_two_workers_give_the_same_bits(cfg, partials, monkeypatch):
    cfg = several_slices(monkeypatch, cfg, 7, partials, itemsize=4)  # 7 samples: uneven slices
    rng = np.random.default_rng(3)
    x, w, b = make(cfg, rng, np.float32)
    dy = rng.standard_normal(ref_conv2d(x, w, b, cfg[3], pads_of(cfg[4]), *cfg[5:]).shape).astype(np.float32)
    calls = []
    real = workers.run_pieces
    monkeypatch.setattr(workers, "run_pieces", lambda fn, p, xp: calls.append(len(p)) or real(fn, p, xp))
    results = {}
    for n in (1, 2, 1):
        monkeypatch.setattr(workers, "_count", [n])
        for first in (False, True):
            results.setdefault(first, []).append(forward_backward(cfg, x, w, b, dy, first_layer=first))
    assert calls and min(calls) >= 2  # every kernel ran its slices through the workers
    for runs in results.values():
        for run in runs[1:]:
            for got, want in zip(run, runs[0]):
                assert got.dtype == np.float32
                np.testing.assert_array_equal(got, want)
    y = results[False][0][0]
    y = results[1][0][0]
    np.testing.assert_allclose(
        y, ref_conv2d(x, w, b, cfg[3], pads_of(cfg[4]), *cfg[5:]), rtol=1e-4, atol=1e-4
    )


@pytest.mark.parametrize("cfg", PATHS)
def test_gradcheck_with_slices_on_two_workers(cfg, monkeypatch):
    cfg = several_slices(monkeypatch, cfg, 5, partials=1)
    monkeypatch.setattr(workers, "_count", [2])
    rng = np.random.default_rng(4)
    x, w, b = make(cfg, rng)
    _, _, _, stride, padding, dilation, groups = cfg
    y = autograd.conv2d(T(x, False), T(w), None if b is None else T(b), stride, padding, dilation, groups)
    np.testing.assert_allclose(
        y.to_numpy(), ref_conv2d(x, w, b, stride, pads_of(padding), dilation, groups), rtol=1e-12, atol=1e-12
    )
    args = [x, w] if b is None else [x, w, b]
    gradcheck(
        lambda *a: autograd.conv2d(*a[:2], a[2] if len(a) > 2 else None, stride, padding, dilation, groups),
        args,
    )


def test_weight_gradient_partials_are_added_in_slice_order(monkeypatch):
    """dW is the sum of the slices' partials taken in slice order, whichever worker
    finished first: here the first slice's piece is made to finish last."""
    import time

    cfg = ((6, *CONFIGS[4][0][1:]), *CONFIGS[4][1:])
    monkeypatch.setattr(slices, "_SKINNY_CHUNK_BYTES", 1)  # one sample per slice: 6 partials
    rng = np.random.default_rng(5)
    x, w, b = make(cfg, rng, np.float32)
    dy = rng.standard_normal((6, 4, 7, 8)).astype(np.float32)
    monkeypatch.setattr(workers, "_count", [1])
    want = forward_backward(cfg, x, w, b, dy)
    monkeypatch.setattr(workers, "_count", [2])
    real_chunks = slices.column_chunks
    late = []

    def first_slice_late(xp, xh, geo, pads, slices):
        for i0, i1, cb in real_chunks(xp, xh, geo, pads, slices):
            if i0 == 0:
                time.sleep(0.05)  # the other thread takes the later slices meanwhile
                late.append(i0)
            yield i0, i1, cb

    monkeypatch.setattr(slices, "column_chunks", first_slice_late)
    got = forward_backward(cfg, x, w, b, dy)
    assert late
    for a, c in zip(got, want):
        np.testing.assert_array_equal(a, c)


def test_small_work_runs_inline_on_one_blas_thread(monkeypatch):
    """A batch whose columns fit one slice is not handed to the workers; its small
    products run on one BLAS thread."""
    from singa.kernels import blas_threads

    calls, limits = [], []
    real_limit = blas_threads.limit
    monkeypatch.setattr(workers, "_count", [2])
    monkeypatch.setattr(workers, "run_pieces", lambda fn, p, xp: calls.append(len(p)) or [fn(*a) for a in p])
    monkeypatch.setattr(blas_threads, "limit", lambda n: limits.append(n) or real_limit(n))
    rng = np.random.default_rng(6)
    for cfg in PATHS:
        x, w, b = make(cfg, rng, np.float32)
        forward_backward(cfg, x, w, b, np.ones_like(ref_conv2d(x, w, b, cfg[3], pads_of(cfg[4]), *cfg[5:])))
    assert set(calls) <= {1}  # a single slice runs inline, without the workers' bookkeeping
    assert limits and set(limits) == {1}


@pytest.mark.parametrize("cfg", PATHS + [CONFIGS[6]])
def test_relu_on_the_slices_is_relu_after(cfg, monkeypatch):
    """conv_forward.forward(..., relu=True) (the eval fusion) is max(forward(...), 0), bitwise."""
    cfg = several_slices(monkeypatch, cfg, 5, itemsize=4)
    monkeypatch.setattr(workers, "_count", [2])
    rng = np.random.default_rng(7)
    x, w, b = make(cfg, rng, np.float32)
    _, _, _, stride, padding, dilation, groups = cfg
    op = autograd.conv2d(T(x), T(w), None if b is None else T(b), *cfg[3:]).creator
    args = (x, w) if b is None else (x, w, b)
    plain = np.maximum(op.forward(*args), 0)
    fused = conv_forward.forward(*args, **op.geometry(), relu=True)
    assert (plain == 0).any() and (plain > 0).any()
    np.testing.assert_array_equal(fused, plain)


@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("cfg", PATHS + [CONFIGS[6]])
def test_residual_on_the_slices_is_an_add_before_relu(cfg, relu, monkeypatch):
    """conv_forward.forward(..., residual=r) (the eval conv+add fusion) is forward(...) + r, then
    ReLU, bitwise, on every path, for a residual in NCHW memory and in NHWC memory."""
    cfg = several_slices(monkeypatch, cfg, 5, itemsize=4)
    monkeypatch.setattr(workers, "_count", [2])
    rng = np.random.default_rng(8)
    x, w, b = make(cfg, rng, np.float32)
    op = autograd.conv2d(T(x), T(w), None if b is None else T(b), *cfg[3:]).creator
    args = (x, w) if b is None else (x, w, b)
    y = op.forward(*args)
    for r in (rng.standard_normal(y.shape).astype(np.float32), np.ascontiguousarray(y.transpose(0, 2, 3, 1))):
        r = r if r.shape == y.shape else r.transpose(0, 3, 1, 2) * -0.5
        plain = y + r
        plain = np.maximum(plain, 0) if relu else plain
        res = r.copy() if r.flags.c_contiguous else r
        fused = conv_forward.forward(*args, **op.geometry(), relu=relu, residual=res)
        assert (plain < 0).any() != relu and (plain > 0).any()
        np.testing.assert_array_equal(fused, plain)


@pytest.mark.parametrize("window", [(2, 2, 2, 2), (3, 3, 2, 2), (2, 1, 1, 1)])
@pytest.mark.parametrize("cfg", PATHS + [CONFIGS[6]])
def test_max_pool_on_the_slices_is_the_pooling_operator_after(cfg, window, monkeypatch):
    """conv_forward.forward(..., relu=True, pool=window) (the eval conv+relu+maxpool fusion) gives
    MaxPool2d's output of ReLU's output, bitwise, NaN included, on every path."""
    from singa.autograd.pooling import MaxPool2d

    cfg = several_slices(monkeypatch, cfg, 5, itemsize=4)
    monkeypatch.setattr(workers, "_count", [2])
    rng = np.random.default_rng(9)
    x, w, b = make(cfg, rng, np.float32)
    x[1, :, 0, 0] = np.nan
    op = autograd.conv2d(T(x), T(w), None if b is None else T(b), *cfg[3:]).creator
    args = (x, w) if b is None else (x, w, b)
    kh, kw, sh, sw = window
    pool = MaxPool2d((kh, kw), (sh, sw), (0, 0, 0, 0))
    pool.requires_grad = False
    activated = np.maximum(op.forward(*args), 0)
    want = pool.forward(activated)
    got = conv_forward.forward(*args, **op.geometry(), relu=True, pool=window)
    assert np.isnan(want).any() and (activated == 0).any()
    np.testing.assert_array_equal(got, want)  # NaN where want has NaN
    assert np.array_equal(np.signbit(got), np.signbit(want))


def test_large_products_take_two_slices_even_when_their_columns_fit_one():
    """Inside a training step BLAS holds one thread, so a large lone slice would run
    on one core: products of at least ``_SPLIT_MACS`` multiply-adds are cut in two."""
    per_sample = 147_456  # ResNet-18's 256 -> 512 stride-2 3x3 convolution, a sample's columns
    assert slices.batch_slices(np, 32, per_sample, 512) == [(0, 16), (16, 32)]
    assert slices.batch_slices(np, 4, 1_000, 512) == [(0, 4)]  # small work stays whole
    assert slices.batch_slices(np, 32, 51_200, 16) == [(0, 16), (16, 32)]  # 1.6 MB of columns, 6.6 M
    assert slices.batch_slices(np, 32, 25_600, 16) == [(0, 32)]  # 0.8 MB, 3.3 M: stays whole
    assert slices.batch_slices(np, 1, 4 << 20, 512) == [(0, 1)]  # one sample cannot be cut
