"""Pooling: forward against direct-loop references with PyTorch's window rules,
gradients against finite differences, ties, errors, dtype, layouts and threads."""

import numpy as np
import pytest

from singa import autograd
from singa.autograd.gradcheck import gradcheck
from singa.autograd.pooling import AvgPool2d, MaxPool2d
from singa.kernels import workers
from singa.tensor import Tensor


def T(a, grad=True):
    return Tensor(data=a, dtype=a.dtype, requires_grad=grad, stores_grad=grad)


def pair(v):
    return (v, v) if np.isscalar(v) else tuple(v)


def pads_of(p):
    if np.isscalar(p):
        return (p,) * 4
    return (p[0], p[1], p[0], p[1]) if len(p) == 2 else tuple(p)


def out_len(n, k, s, p0, p1, ceil):
    if ceil:
        o = -(-(n + p0 + p1 - k) // s) + 1
        if (o - 1) * s >= n + p0:
            o -= 1
        return o
    return (n + p0 + p1 - k) // s + 1


def ref_pool(x, kind, kernel, stride=None, padding=0, ceil=False, count_include_pad=True):
    """Direct loops over output cells; window bounds as in PyTorch's CPU kernels."""
    kh, kw = pair(kernel)
    sh, sw = pair(kernel if stride is None else stride)
    t, l, b, r = pads_of(padding)
    n, c, h, w = x.shape
    oh, ow = out_len(h, kh, sh, t, b, ceil), out_len(w, kw, sw, l, r, ceil)
    y = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * sh - t, j * sw - l
            h1, w1 = min(h0 + kh, h + b), min(w0 + kw, w + r)  # window clipped at the padding
            pool_size = (h1 - h0) * (w1 - w0)
            hs, ws = max(h0, 0), max(w0, 0)
            he, we = min(h1, h), min(w1, w)
            win = x[:, :, hs:he, ws:we]
            if kind == "max":
                y[:, :, i, j] = win.max(axis=(2, 3))
            else:
                div = pool_size if count_include_pad else (he - hs) * (we - ws)
                y[:, :, i, j] = win.sum(axis=(2, 3)) / div
    return y


def distinct(rng, shape):
    """Values at least 1e-2 apart, so finite differences never cross a tie."""
    return rng.permutation(np.prod(shape)).reshape(shape) * 0.01 - 1.0


# (x shape, kernel, stride, padding, ceil_mode)
CONFIGS = [
    ((2, 3, 8, 8), 2, None, 0, False),  # the common case: stride = kernel, exact cover
    ((2, 3, 7, 9), 3, 2, 1, True),  # overlapping, padding, ceil mode with an extra cell
    ((2, 2, 7, 7), 3, 1, 1, False),  # stride 1, heavily overlapping
    ((1, 2, 6, 9), (2, 3), (2, 1), (1, 1), True),  # non-square
    ((2, 2, 5, 5), 2, 3, 0, True),  # stride > kernel: gaps between windows
    ((1, 3, 9, 8), 3, 2, (1, 0, 2, 1), False),  # asymmetric padding
    ((2, 2, 5, 7), (3, 2), 2, (1, 1, 0, 1), True),  # asymmetric + ceil
    ((1, 2, 7, 7), 2, None, 0, True),  # ceil mode, stride = kernel, extra row/column
    ((2, 2, 4, 5), 1, 1, 0, False),  # 1x1 window
]


def nhwc(a):
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_max_forward(cfg, layout):
    xs, k, s, p, ceil = cfg
    x = np.random.default_rng(0).standard_normal(xs)
    y = autograd.max_pool_2d(T(nhwc(x) if layout == "nhwc" else x), k, s, p, ceil)
    np.testing.assert_array_equal(y.to_numpy(), ref_pool(x, "max", k, s, p, ceil))


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("cip", [True, False])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_avg_forward(cfg, cip, layout):
    xs, k, s, p, ceil = cfg
    x = np.random.default_rng(1).standard_normal(xs)
    y = autograd.avg_pool_2d(T(nhwc(x) if layout == "nhwc" else x), k, s, p, ceil, cip)
    np.testing.assert_allclose(y.to_numpy(), ref_pool(x, "avg", k, s, p, ceil, cip), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("cfg", CONFIGS)
def test_max_gradcheck(cfg):
    xs, k, s, p, ceil = cfg
    x = distinct(np.random.default_rng(2), xs)
    gradcheck(lambda t: autograd.max_pool_2d(t, k, s, p, ceil), [x])


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("cip", [True, False])
def test_avg_gradcheck(cfg, cip):
    xs, k, s, p, ceil = cfg
    x = np.random.default_rng(3).standard_normal(xs)
    gradcheck(lambda t: autograd.avg_pool_2d(t, k, s, p, ceil, cip), [x])


@pytest.mark.parametrize("cfg", [CONFIGS[1], CONFIGS[2]])
def test_gradcheck_nhwc_input(cfg):
    xs, k, s, p, ceil = cfg
    x = distinct(np.random.default_rng(4), xs)

    def f(t, pool):
        t.data = nhwc(t.data)
        return pool(t)

    gradcheck(lambda t: f(t, lambda u: autograd.max_pool_2d(u, k, s, p, ceil)), [x])
    gradcheck(lambda t: f(t, lambda u: autograd.avg_pool_2d(u, k, s, p, ceil, False)), [x])


def test_max_ties_give_the_gradient_to_the_first_maximum():
    # all equal: every window's gradient goes to its top-left cell (row-major first)
    x = T(np.zeros((1, 1, 4, 4)))
    y = autograd.max_pool_2d(x, 2)
    g = autograd.gradients(y, np.arange(1.0, 5.0).reshape(1, 1, 2, 2))[x].to_numpy()[0, 0]
    expect = np.zeros((4, 4))
    expect[0::2, 0::2] = [[1, 2], [3, 4]]
    np.testing.assert_array_equal(g, expect)
    # overlapping windows with ties: each window's gradient lands once, on its first maximum
    a = np.array([[[[1.0, 3.0, 3.0, 0.0], [3.0, 2.0, 3.0, 1.0], [0.0, 3.0, 1.0, 3.0]]]])
    x = T(a)
    y = autograd.max_pool_2d(x, 2, 1)
    dy = np.arange(1.0, 7.0).reshape(1, 1, 2, 3)
    g = autograd.gradients(y, dy)[x].to_numpy()[0, 0]
    expect = np.zeros((3, 4))
    for i in range(2):
        for j in range(3):
            win = a[0, 0, i : i + 2, j : j + 2]
            di, dj = np.unravel_index(np.argmax(win), win.shape)  # first maximum
            expect[i + di, j + dj] += dy[0, 0, i, j]
    np.testing.assert_array_equal(g, expect)
    assert g.sum() == dy.sum()


def test_max_padding_never_wins():
    x = -np.ones((1, 1, 3, 3)) * 5.0  # all negative: zero padding would win
    y = autograd.max_pool_2d(T(x), 2, 2, 1)
    np.testing.assert_array_equal(y.to_numpy(), np.full((1, 1, 2, 2), -5.0))


def test_global_avg_pool():
    rng = np.random.default_rng(5)
    for xs in ((2, 3, 4, 5), (1, 2, 1, 1), (2, 1, 3, 1)):
        x = rng.standard_normal(xs)
        for xin in (x, nhwc(x)):
            y = autograd.global_avg_pool(T(xin))
            assert y.shape == (xs[0], xs[1], 1, 1)
            np.testing.assert_allclose(y.to_numpy(), x.mean(axis=(2, 3), keepdims=True), rtol=1e-12)
        gradcheck(autograd.global_avg_pool, [x])
    with pytest.raises(ValueError, match=r"global_avg_pool: .*\(2, 3, 4\)"):
        autograd.global_avg_pool(T(np.zeros((2, 3, 4))))


@pytest.mark.parametrize("k, s, p, ceil", [(2, None, 0, False), (3, 2, 1, True), (3, 1, (0, 2), False)])
def test_pool_1d(k, s, p, ceil):
    rng = np.random.default_rng(6)
    x = distinct(rng, (2, 3, 9))
    p2 = (0, p, 0, p) if np.isscalar(p) else (0, p[0], 0, p[1])
    s2 = None if s is None else (1, s)
    y = autograd.max_pool_1d(T(x), k, s, p, ceil)
    np.testing.assert_array_equal(y.to_numpy(), ref_pool(x[:, :, None], "max", (1, k), s2, p2, ceil)[:, :, 0])
    for cip in (True, False):
        y = autograd.avg_pool_1d(T(x), k, s, p, ceil, cip)
        expect = ref_pool(x[:, :, None], "avg", (1, k), s2, p2, ceil, cip)[:, :, 0]
        np.testing.assert_allclose(y.to_numpy(), expect, rtol=1e-12)
        gradcheck(lambda t, c=cip: autograd.avg_pool_1d(t, k, s, p, ceil, c), [x])
    gradcheck(lambda t: autograd.max_pool_1d(t, k, s, p, ceil), [x])
    op = autograd.max_pool_1d(T(x), k, s, p, ceil).creator
    assert op.kernel_size == (k,) and op.stride == ((k if s is None else s),) and op.spatial_dims == 1
    assert op.pads == ((p, p) if np.isscalar(p) else p)


def test_pool_1d_errors():
    with pytest.raises(ValueError, match=r"max_pool_1d: x must be \(N, C, L\)"):
        autograd.max_pool_1d(T(np.zeros((1, 2, 3, 4))), 2)
    with pytest.raises(ValueError, match=r"avg_pool_1d: padding"):
        autograd.avg_pool_1d(T(np.zeros((1, 2, 8))), 3, padding=(1, 1, 1))
    with pytest.raises(ValueError, match=r"max_pool_1d: output would be empty"):
        autograd.max_pool_1d(T(np.zeros((1, 2, 2))), 3)


def test_attributes_for_the_exporter():
    x = T(np.zeros((1, 1, 8, 8)))
    op = autograd.max_pool_2d(x, 3, 2, (1, 0, 1, 1), True).creator
    assert isinstance(op, MaxPool2d)
    assert op.kernel_size == (3, 3) and op.stride == (2, 2) and op.pads == (1, 0, 1, 1) and op.ceil_mode
    op = autograd.avg_pool_2d(x, (2, 3), padding=1, count_include_pad=False).creator
    assert isinstance(op, AvgPool2d)
    assert op.kernel_size == (2, 3) and op.stride == (2, 3) and op.pads == (1, 1, 1, 1)
    assert not op.ceil_mode and not op.count_include_pad


@pytest.mark.parametrize(
    "fn, xs, args, match",
    [
        (
            autograd.max_pool_2d,
            (1, 1, 4),
            (2,),
            r"max_pool_2d: x must be \(N, C, H, W\), got shape \(1, 1, 4\)",
        ),
        (autograd.avg_pool_2d, (1, 1, 4, 4), (2, 2, 2), r"avg_pool_2d: padding .* smaller than the kernel"),
        (autograd.max_pool_2d, (1, 1, 4, 4), (3, 1, (0, 0, 3, 0)), r"smaller than the kernel"),
        (autograd.max_pool_2d, (1, 1, 2, 5), (3,), r"max_pool_2d: output would be empty.*\(1, 1, 2, 5\)"),
        (autograd.avg_pool_2d, (1, 1, 4, 4), (0,), r"avg_pool_2d: kernel_size must be >= 1"),
        (autograd.max_pool_2d, (1, 1, 4, 4), (2, (1, 2, 3)), r"max_pool_2d: stride must be an int or 2 ints"),
    ],
)
def test_errors(fn, xs, args, match):
    with pytest.raises(ValueError, match=match):
        fn(T(np.zeros(xs)), *args)


def test_float32_is_preserved():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    for f in (
        lambda t: autograd.max_pool_2d(t, 3, 2, 1, True),
        lambda t: autograd.avg_pool_2d(t, 3, 2, 1, True, False),
        autograd.global_avg_pool,
    ):
        t = T(x)
        y = f(t)
        assert y.dtype == np.float32
        g = autograd.gradients(y, np.ones(y.shape, np.float32))[t]
        assert g.dtype == np.float32 and g.shape == x.shape
    y = autograd.avg_pool_2d(T(x), 3, 2, 1, True, False)
    np.testing.assert_allclose(
        y.to_numpy(), ref_pool(x.astype(np.float64), "avg", 3, 2, 1, True, False), rtol=1e-5
    )


@pytest.mark.parametrize("cfg", [CONFIGS[0], CONFIGS[1], CONFIGS[2], CONFIGS[4]])
def test_threaded_split_matches_inline(cfg, monkeypatch):
    xs, k, s, p, ceil = cfg
    rng = np.random.default_rng(8)
    x = distinct(rng, (5,) + xs[1:])
    out = []
    for threads, min_split in ((1, 10**9), (3, 0)):
        monkeypatch.setattr(workers, "_count", [min(threads, 2)])
        monkeypatch.setattr(workers, "PIECE_WORK", 1 + min_split)
        res = []
        for f in (
            lambda t: autograd.max_pool_2d(t, k, s, p, ceil),
            lambda t: autograd.avg_pool_2d(t, k, s, p, ceil, False),
        ):
            t = T(x)
            y = f(t)
            dy = np.random.default_rng(9).standard_normal(y.shape)
            res += [y.to_numpy(), autograd.gradients(y, dy)[t].to_numpy()]
        out.append(res)
    for a, b in zip(*out):
        np.testing.assert_array_equal(a, b)


def test_two_live_outputs_do_not_share_memory():
    rng = np.random.default_rng(10)
    x1, x2 = rng.standard_normal((2, 2, 3, 8, 8))
    t1, t2 = T(x1), T(x2)
    y1 = autograd.max_pool_2d(t1, 2)
    y2 = autograd.max_pool_2d(t2, 2)
    np.testing.assert_array_equal(y1.to_numpy(), ref_pool(x1, "max", 2))
    g1 = autograd.gradients(y1, np.ones(y1.shape))[t1].to_numpy()
    g2 = autograd.gradients(y2, np.ones(y2.shape))[t2].to_numpy()
    assert g1.sum() == y1.size() and g2.sum() == y2.size()
    np.testing.assert_array_equal(y2.to_numpy(), ref_pool(x2, "max", 2))


@pytest.mark.gpu
def test_gpu_matches_cpu():
    pytest.importorskip("cupy")
    from singa import device

    if device.get_num_gpus() == 0:
        pytest.skip("no CUDA GPU visible to cupy")
    gpu = device.create_cuda_gpu()
    x = distinct(np.random.default_rng(12), (2, 3, 7, 9)).astype(np.float32)
    fns = [
        lambda t: autograd.max_pool_2d(t, 3, 2, 1, True),
        lambda t: autograd.max_pool_2d(t, 2),
        lambda t: autograd.avg_pool_2d(t, 3, 2, (1, 0, 1, 1), True, False),
        autograd.global_avg_pool,
    ]
    for f in fns:
        res = []
        for dev in (None, gpu):
            t = Tensor(data=x, device=dev, requires_grad=True, stores_grad=True)
            y = f(t)
            dy = Tensor(data=np.linspace(-1, 1, y.size()).reshape(y.shape).astype(np.float32), device=dev)
            res.append((y.to_numpy(), autograd.gradients(y, dy)[t].to_numpy()))
        np.testing.assert_allclose(res[1][0], res[0][0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(res[1][1], res[0][1], rtol=1e-5, atol=1e-6)


# ----- globalaveragepool (SINGA's name; N-d and channels_last) --------------------------------------
@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 2, 2)])
@pytest.mark.parametrize("fmt", ["channels_first", "channels_last"])
def test_globalaveragepool_any_rank_and_both_formats(shape, fmt):
    x = np.random.default_rng(9).standard_normal(shape)
    axes = tuple(range(2, len(shape))) if fmt == "channels_first" else tuple(range(1, len(shape) - 1))
    y = autograd.globalaveragepool(T(x), fmt)
    np.testing.assert_allclose(y.to_numpy(), x.mean(axis=axes, keepdims=True), rtol=1e-13)
    gradcheck(lambda t: autograd.globalaveragepool(t, fmt), [x])
    gradcheck(lambda t: autograd.GlobalAveragePool(fmt)(t)[0], [x])


def test_globalaveragepool_singa_spelling_channel_last():
    x = np.arange(9.0).reshape(1, 3, 3, 1)
    y = autograd.globalaveragepool(T(x), "channel_last")
    np.testing.assert_array_equal(y.to_numpy(), [[[[4.0]]]])
    # the result's creator is the pooling itself (SINGA's tests call its backward)
    np.testing.assert_allclose(y.creator.backward(np.ones((1, 1, 1, 1))), np.full(x.shape, 1 / 9))


def test_globalaveragepool_errors():
    with pytest.raises(ValueError, match=r"^globalaveragepool: data_format must be"):
        autograd.globalaveragepool(T(np.ones((1, 2, 3))), "nchw")
    with pytest.raises(ValueError, match=r"^globalaveragepool: x needs a batch, a channel and spatial axes"):
        autograd.globalaveragepool(T(np.ones((2, 3))))


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("k, s", [(2, 2), (2, 1)])
def test_max_nan_window_gives_nan_and_no_gradient(layout, k, s):
    a = np.arange(32.0).reshape(1, 2, 4, 4)
    a[0, 1, 1, 1] = np.nan
    x = T(nhwc(a) if layout == "nhwc" else a)
    y = autograd.max_pool_2d(x, k, s)
    ref = ref_pool(np.nan_to_num(a, nan=-1.0), "max", k, s)
    nan_out = np.zeros(ref.shape, bool)
    nan_out[0, 1, : 2 if s == 1 else 1, : 2 if s == 1 else 1] = True
    np.testing.assert_array_equal(np.isnan(y.to_numpy()), nan_out)
    np.testing.assert_array_equal(y.to_numpy()[~nan_out], ref[~nan_out])
    g = autograd.gradients(y, np.ones(y.shape))[x].to_numpy()
    assert g[0, 0].sum() == y.shape[2] * y.shape[3]  # every clean window sends its 1
    assert g[0, 1].sum() == y.shape[2] * y.shape[3] - nan_out.sum()
    assert not np.isnan(g).any()


def test_max_float16_goes_through_float32_exactly():
    x = distinct(np.random.default_rng(13), (2, 3, 6, 6)).astype(np.float16)
    for xin in (x, nhwc(x)):
        t = T(xin)
        y = autograd.max_pool_2d(t, 3, 2, 1, True)
        assert y.dtype == np.float16
        np.testing.assert_array_equal(y.to_numpy(), ref_pool(x.astype(np.float64), "max", 3, 2, 1, True))
        dy = np.ones(y.shape, np.float16)
        g = autograd.gradients(y, dy)[t].to_numpy()
        assert g.dtype == np.float16 and g.sum() == y.size()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k, s", [((2, 2), (2, 2)), ((3, 3), (1, 1)), ((3, 2), (2, 1))])
def test_max_of_windows_compiled_pass_gives_the_views_bits(dtype, k, s):
    """The compiled pass (channels contiguous) and the strided views (channels strided)
    give the same bits, NaN, signed zeros and infinities included, and the maximum of
    each window as numpy computes it."""
    from singa.kernels import im2col as im

    rng = np.random.default_rng(3)
    src = rng.standard_normal((2, 7, 6, 5)).astype(dtype)
    src[0, 0, 0, :4] = [np.nan, -0.0, 0.0, -np.inf]
    src[0, 0, 1, :4] = [1.0, 0.0, -0.0, np.inf]
    src[1, 1, 1, :3] = [np.nan, -0.0, np.nan]  # NaN after the window's first cell too
    src[1, 0, 0, 1:3] = [0.0, np.nan]
    (kh, kw), (sh, sw) = k, s
    ph, pw = (7 - kh) // sh + 1, (6 - kw) // sw + 1
    compiled = np.empty((2, ph, pw, 5), dtype)
    im.max_of_windows(np, src, kh, kw, sh, sw, compiled)
    strided_src = np.asfortranarray(src)  # channels not contiguous: the views
    viewed = np.empty((2, ph, pw, 5), dtype)
    im.max_of_windows(np, strided_src, kh, kw, sh, sw, viewed)
    assert compiled.tobytes() == viewed.tobytes()
    with np.errstate(invalid="ignore"):
        want = np.stack(
            [
                src[:, i : i + sh * (ph - 1) + 1 : sh, j : j + sw * (pw - 1) + 1 : sw]
                for i in range(kh)
                for j in range(kw)
            ]
        )
    np.testing.assert_array_equal(compiled, np.maximum.reduce(want, axis=0))


@pytest.mark.parametrize("dy_layout", ["nchw", "nhwc"])
def test_max_backward_with_a_gradient_of_the_other_layout(dy_layout):
    """An NHWC input whose gradient comes NCHW in memory (Flatten's backward) gives the
    same input gradient as one that comes NHWC, as the float64 reference does."""
    rng = np.random.default_rng(11)
    x = distinct(rng, (3, 16, 6, 6))
    op = MaxPool2d((2, 2), (2, 2), (0, 0, 0, 0))
    op.requires_grad = True
    op.forward(nhwc(x))
    g = rng.standard_normal((3, 16, 3, 3))
    dy = np.ascontiguousarray(g) if dy_layout == "nchw" else nhwc(g)
    got = op.backward(dy)
    want = np.zeros_like(x)
    for n, c, i, j in np.ndindex(g.shape):
        win = x[n, c, 2 * i : 2 * i + 2, 2 * j : 2 * j + 2]
        a, b = np.unravel_index(np.argmax(win), (2, 2))
        want[n, c, 2 * i + a, 2 * j + b] = g[n, c, i, j]
    np.testing.assert_array_equal(got, want)
