"""conv2d: forward against a direct-loop reference, gradients against finite differences,
argument errors, dtype, memory layouts, threads and the buffer pool."""

import weakref

import numpy as np
import pytest

from singa import autograd
from singa.autograd.conv import Conv2d
from singa.autograd.gradcheck import gradcheck
from singa.kernels import buffers, workers
from singa.tensor import Tensor


def ref_conv2d(x, w, b=None, stride=1, pads=(0, 0, 0, 0), dilation=1, groups=1):
    """Direct loops over output pixels and groups (float64)."""
    sh, sw = (stride, stride) if np.isscalar(stride) else stride
    dh, dw = (dilation, dilation) if np.isscalar(dilation) else dilation
    t, l, bo, r = pads
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.zeros((n, c, h + t + bo, wd + l + r))
    xp[:, :, t : t + h, l : l + wd] = x
    oh = (h + t + bo - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + l + r - dw * (kw - 1) - 1) // sw + 1
    og = o // groups
    y = np.zeros((n, o, oh, ow))
    for g in range(groups):
        wg = w[g * og : (g + 1) * og]
        for i in range(oh):
            for j in range(ow):
                win = xp[
                    :, g * cg : (g + 1) * cg, i * sh : i * sh + dh * kh : dh, j * sw : j * sw + dw * kw : dw
                ]
                y[:, g * og : (g + 1) * og, i, j] = np.einsum("nckl,ockl->no", win, wg)
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    return y


def pads_of(padding):
    if np.isscalar(padding):
        return (padding,) * 4
    if len(padding) == 2:
        return (padding[0], padding[1], padding[0], padding[1])
    return tuple(padding)


# (x shape, W shape, bias, stride, padding, dilation, groups)
CONFIGS = [
    ((2, 1, 7, 6), (3, 1, 3, 3), True, 1, 0, 1, 1),  # one input channel (kernel-major columns)
    ((2, 1, 6, 7), (2, 1, 2, 3), False, 2, (1, 0), 1, 1),  # 1 channel, stride 2, non-square
    ((2, 3, 7, 6), (4, 3, 3, 2), False, 2, 1, 1, 1),  # stride 2, non-square kernel and input
    ((2, 3, 6, 6), (4, 3, 3, 3), True, 1, (1, 2, 0, 1), 1, 1),  # asymmetric padding, 3 channels
    ((2, 6, 7, 8), (4, 6, 3, 3), True, 1, 1, 1, 1),  # pixel-major columns, symmetric padding
    ((1, 6, 9, 8), (4, 6, 3, 2), False, (2, 1), (2, 1, 1, 0), 2, 1),  # dilation 2, asymmetric
    ((2, 6, 7, 7), (4, 3, 3, 3), True, 1, 1, 1, 2),  # groups 2
    ((2, 4, 6, 7), (8, 1, 3, 3), False, 2, (0, 1, 1, 1), 1, 4),  # depthwise, multiplier 2
    ((2, 5, 5, 6), (5, 1, 3, 3), True, 1, 1, (2, 1), 5),  # depthwise, dilated
    ((1, 6, 4, 5), (3, 6, 1, 1), True, 1, 0, 1, 1),  # 1x1 kernel
    ((2, 2, 5, 5), (4, 1, 1, 1), False, 1, 0, 1, 2),  # grouped 1x1, kernel-major is not used
    ((2, 6, 7, 8), (4, 6, 3, 2), False, 1, (2, 1, 0, 1), (2, 1), 1),  # stride 1: dx as a convolution
    ((2, 6, 5, 5), (4, 6, 3, 3), True, 1, 3, 1, 1),  # padding beyond the kernel: dx by col2im
]


def make(cfg, rng, dtype=np.float64):
    xs, ws, bias, *_ = cfg
    x = rng.standard_normal(xs).astype(dtype)
    w = rng.standard_normal(ws).astype(dtype)
    b = rng.standard_normal(ws[0]).astype(dtype) if bias else None
    return x, w, b


def T(a, grad=True):
    return Tensor(data=a, dtype=a.dtype, requires_grad=grad, stores_grad=grad)


def nhwc(a):
    """The same NCHW values with NHWC memory."""
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_forward_matches_direct_loops(cfg, layout):
    rng = np.random.default_rng(1)
    x, w, b = make(cfg, rng)
    _, _, _, stride, padding, dilation, groups = cfg
    xin = nhwc(x) if layout == "nhwc" else x
    y = autograd.conv2d(T(xin, False), T(w), None if b is None else T(b), stride, padding, dilation, groups)
    expect = ref_conv2d(x, w, b, stride, pads_of(padding), dilation, groups)
    assert y.shape == expect.shape
    np.testing.assert_allclose(y.to_numpy(), expect, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cfg", CONFIGS)
def test_gradcheck(cfg):
    rng = np.random.default_rng(2)
    x, w, b = make(cfg, rng)
    _, _, bias, stride, padding, dilation, groups = cfg
    if bias:
        gradcheck(
            lambda x_, w_, b_: autograd.conv2d(x_, w_, b_, stride, padding, dilation, groups), [x, w, b]
        )
    else:
        gradcheck(lambda x_, w_: autograd.conv2d(x_, w_, None, stride, padding, dilation, groups), [x, w])


@pytest.mark.parametrize("cfg", [CONFIGS[3], CONFIGS[6]])
def test_gradcheck_nhwc_input(cfg):
    rng = np.random.default_rng(3)
    x, w, b = make(cfg, rng)
    _, _, _, stride, padding, dilation, groups = cfg

    def f(x_, w_, b_):
        x_.data = nhwc(x_.data)
        return autograd.conv2d(x_, w_, b_, stride, padding, dilation, groups)

    gradcheck(f, [x, w, b])


@pytest.mark.parametrize("cfg", [CONFIGS[0], CONFIGS[4]])
def test_first_layer_skips_dx_and_only_weights_get_gradients(cfg):
    rng = np.random.default_rng(4)
    x, w, b = make(cfg, rng)
    _, _, _, stride, padding, dilation, groups = cfg
    # the input needs no gradient: dx is never computed
    gradcheck(
        lambda x_, w_, b_: autograd.conv2d(x_, w_, b_, stride, padding, dilation, groups),
        [x, w, b],
        wrt=[1, 2],
    )
    tx, tw, tb = T(x, False), T(w), T(b)
    y = autograd.conv2d(tx, tw, tb, stride, padding, dilation, groups)
    assert y.creator.backward(np.ones(y.shape))[0] is None
    grads = autograd.gradients(y, np.ones(y.shape))
    assert set(grads) == {id(tw), id(tb)}  # keyed by id, as SINGA's gradients()


def test_frozen_weights_give_input_and_bias_gradients():
    rng = np.random.default_rng(5)
    for cfg in (CONFIGS[0], CONFIGS[4]):
        x, w, b = make(cfg, rng)
        gradcheck(lambda x_, w_, b_, c=cfg: autograd.conv2d(x_, w_, b_, *c[3:]), [x, w, b], wrt=[0, 2])


def test_float32_is_preserved_and_close_to_float64():
    rng = np.random.default_rng(6)
    for cfg in (CONFIGS[0], CONFIGS[5], CONFIGS[6]):
        x, w, b = make(cfg, rng)
        x32, w32 = x.astype(np.float32), w.astype(np.float32)
        b32 = None if b is None else b.astype(np.float32)
        tx, tw = T(x32), T(w32)
        tb = None if b32 is None else T(b32)
        y = autograd.conv2d(tx, tw, tb, *cfg[3:])
        assert y.dtype == np.float32
        grads = autograd.gradients(y, np.ones(y.shape, np.float32))
        assert all(g.dtype == np.float32 for g in grads.values())
        assert grads[tx].shape == x.shape and grads[tw].shape == w.shape
        np.testing.assert_allclose(
            y.to_numpy(), ref_conv2d(x, w, b, cfg[3], pads_of(cfg[4]), *cfg[5:]), atol=1e-4
        )


def test_attributes_for_the_exporter():
    rng = np.random.default_rng(7)
    x, w, b = make(CONFIGS[5], rng)
    y = autograd.conv2d(T(x), T(w), None, stride=(2, 1), padding=(2, 1, 1, 0), dilation=2, groups=1)
    op = y.creator
    assert isinstance(op, Conv2d)
    assert op.stride == (2, 1) and op.pads == (2, 1, 1, 0) and op.dilation == (2, 2)
    assert op.groups == 1 and op.kernel_size == (3, 2) and op.bias is False
    y = autograd.conv2d(T(x), T(w), T(np.zeros(4)), padding=(1, 2))
    assert y.creator.pads == (1, 2, 1, 2) and y.creator.bias is True


@pytest.mark.parametrize(
    "xs, ws, kw, match",
    [
        ((2, 3, 8, 8), (4, 2, 3, 3), {}, r"conv2d: x of shape \(2, 3, 8, 8\) and W of shape \(4, 2, 3, 3\)"),
        ((2, 4, 8, 8), (3, 2, 3, 3), {"groups": 2}, r"O % groups"),
        ((2, 4, 8, 8), (4, 1, 3, 3), {"groups": 2}, r"C == W.shape\[1\] \* groups"),
        ((2, 3, 4, 4), (4, 3, 5, 5), {}, r"conv2d: output would be empty.*\(2, 3, 4, 4\).*\(4, 3, 5, 5\)"),
        ((2, 3, 4, 4), (4, 3, 3, 3), {"dilation": 2}, r"output would be empty"),
        ((2, 3, 8), (4, 3, 3, 3), {}, r"conv2d: x must be \(N, C, H, W\)"),
        ((2, 3, 8, 8), (4, 3, 3, 3), {"stride": 0}, r"conv2d: stride must be >= 1"),
        ((2, 3, 8, 8), (4, 3, 3, 3), {"padding": (1, 2, 3)}, r"conv2d: padding must be"),
        ((2, 3, 8, 8), (4, 3, 3, 3), {"padding": -1}, r"conv2d: padding must be >= 0"),
    ],
)
def test_shape_errors(xs, ws, kw, match):
    with pytest.raises(ValueError, match=match):
        autograd.conv2d(T(np.zeros(xs)), T(np.zeros(ws)), **kw)


def test_bias_shape_error():
    with pytest.raises(ValueError, match=r"conv2d: bias of shape \(3,\)"):
        autograd.conv2d(T(np.zeros((1, 3, 5, 5))), T(np.zeros((4, 3, 3, 3))), T(np.zeros(3)))


def test_no_grad_keeps_nothing():
    rng = np.random.default_rng(8)
    x, w, b = make(CONFIGS[4], rng)
    with autograd.no_grad():
        y = autograd.conv2d(T(x), T(w), T(b), padding=1)
    assert y.creator is None
    np.testing.assert_allclose(y.to_numpy(), ref_conv2d(x, w, b, 1, (1, 1, 1, 1)), atol=1e-12)


@pytest.mark.parametrize("stride", [1, 2])
def test_padded_convolution_keeps_only_its_input_for_backward(stride):
    """No padded copy of the input is made for (or kept until) backward: the padding
    is done a batch slice at a time, in forward and again in backward."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((3, 8, 9, 9)).transpose(0, 2, 3, 1).copy().transpose(0, 3, 1, 2)
    w = rng.standard_normal((6, 8, 3, 3))
    op = Conv2d((3, 3), (stride, stride), (1, 1, 1, 1))
    op.requires_grad, op.needs_grad = True, (True, True)
    op.forward(x, w)
    kept = [a for a in op.cache if isinstance(a, np.ndarray) and a is not x and a is not w]
    assert kept == []
    assert any(a is x for a in op.cache)


@pytest.mark.parametrize("cfg", [CONFIGS[0], CONFIGS[3], CONFIGS[6], CONFIGS[7]])
def test_threaded_split_matches_inline(cfg, monkeypatch):
    rng = np.random.default_rng(9)
    x, w, b = make(cfg, rng)
    x = np.concatenate([x] * 3)  # batch 6: uneven parts for 4 threads
    dy = rng.standard_normal(ref_conv2d(x, w, b, cfg[3], pads_of(cfg[4]), *cfg[5:]).shape)
    out = []
    for threads, piece_work in ((1, 10**9), (2, 1)):
        monkeypatch.setattr(workers, "_count", [threads])
        monkeypatch.setattr(workers, "PIECE_WORK", piece_work)
        tx, tw = T(x), T(w)
        tb = None if b is None else T(b)
        y = autograd.conv2d(tx, tw, tb, *cfg[3:])
        g = autograd.gradients(y, dy)
        out.append([y.to_numpy(), g[tx].to_numpy(), g[tw].to_numpy()])
    for a, c in zip(*out):
        np.testing.assert_allclose(a, c, rtol=1e-12, atol=1e-12)


def test_pooled_buffers_are_not_shared_between_live_results():
    # two forward passes of the same shapes before either backward: the first one's
    # cached columns and output must survive the second call
    rng = np.random.default_rng(10)
    for cfg in (CONFIGS[0], CONFIGS[4]):
        x1, w, b = make(cfg, rng)
        x2 = rng.standard_normal(x1.shape)
        tw, tb = T(w), T(b)
        tx1, tx2 = T(x1), T(x2)
        y1 = autograd.conv2d(tx1, tw, tb, *cfg[3:])
        y2 = autograd.conv2d(tx2, tw, tb, *cfg[3:])
        assert not np.shares_memory(y1.data, y2.data)
        np.testing.assert_allclose(y1.to_numpy(), ref_conv2d(x1, w, b, cfg[3], pads_of(cfg[4]), *cfg[5:]))
        dy = rng.standard_normal(y1.shape)
        g2 = autograd.gradients(y2, dy)
        g1 = autograd.gradients(y1, dy)
        # dW = sum over pixels of dy * window: compare with the reference by linearity
        eps = 1e-6
        for tx, g, x in ((tx1, g1, x1), (tx2, g2, x2)):
            num = (
                ref_conv2d(x, w + eps * g[tw].to_numpy(), b, cfg[3], pads_of(cfg[4]), *cfg[5:])
                - ref_conv2d(x, w, b, cfg[3], pads_of(cfg[4]), *cfg[5:])
            ) / eps
            np.testing.assert_allclose((num * dy).sum(), (g[tw].to_numpy() ** 2).sum(), rtol=1e-6)
            assert g[tx].shape == x.shape


def test_scratch_pool_reuses_only_free_arrays():
    a = buffers.scratch(np, (3, 5), np.float32)
    b = buffers.scratch(np, (3, 5), np.float32)
    assert a is not b
    view = a[1:]
    del a
    c = buffers.scratch(np, (3, 5), np.float32)
    assert c is not b and c is not view.base  # both still referenced
    del c
    d = buffers.scratch(np, (3, 5), np.float32)
    assert d is not b and d is not view.base  # the freed third array, or a new one
    held = view.base
    del view, d
    e = buffers.scratch(np, (3, 5), np.float32)
    assert e is not b and e is not held
    ref = weakref.ref(e)
    del e
    assert buffers.scratch(np, (3, 5), np.float32) is ref()  # a free array is reused
    assert buffers.scratch(np, (3, 5), np.float64).dtype == np.float64
    buffers.clear_scratch()


def _gpu():
    pytest.importorskip("cupy")
    from singa import device

    if device.get_num_gpus() == 0:
        pytest.skip("no CUDA GPU visible to cupy")
    return device.create_cuda_gpu()


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [CONFIGS[0], CONFIGS[3], CONFIGS[5], CONFIGS[6], CONFIGS[7]])
def test_gpu_matches_cpu(cfg):
    gpu = _gpu()
    rng = np.random.default_rng(11)
    x, w, b = make(cfg, rng, np.float32)
    dy = rng.standard_normal(ref_conv2d(x, w, b, cfg[3], pads_of(cfg[4]), *cfg[5:]).shape).astype(np.float32)
    res = []
    for dev in (None, gpu):
        ts = [Tensor(data=a, device=dev, requires_grad=True, stores_grad=True) for a in (x, w)]
        tb = None if b is None else Tensor(data=b, device=dev, requires_grad=True, stores_grad=True)
        y = autograd.conv2d(ts[0], ts[1], tb, *cfg[3:])
        g = autograd.gradients(y, Tensor(data=dy, device=dev))
        res.append([y.to_numpy()] + [g[t].to_numpy() for t in ts + ([tb] if tb is not None else [])])
    for a, c in zip(*res):
        np.testing.assert_allclose(c, a, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cfg", [CONFIGS[4], CONFIGS[5], CONFIGS[-2], CONFIGS[-1]])
def test_columns_made_in_several_batch_slices(cfg, monkeypatch):
    """Columns are made a few samples at a time; slices of one sample (and a last,
    shorter slice) give the same forward and gradients."""
    from singa.kernels import conv_slices

    rng = np.random.default_rng(5)
    xs, *rest = cfg
    cfg = ((5, *xs[1:]), *rest)  # 5 samples: slices of 2, 2 and 1
    x, w, b = make(cfg, rng)
    _, _, _, stride, padding, dilation, groups = cfg
    per_sample = x[0].size * w.shape[2] * w.shape[3] * 8  # about a sample's columns in bytes
    monkeypatch.setattr(conv_slices, "_CHUNK_BYTES", 2 * per_sample)
    monkeypatch.setattr(conv_slices, "_SKINNY_CHUNK_BYTES", 2 * per_sample)
    y = autograd.conv2d(T(x, False), T(w), None if b is None else T(b), stride, padding, dilation, groups)
    expect = ref_conv2d(x, w, b, stride, pads_of(padding), dilation, groups)
    np.testing.assert_allclose(y.to_numpy(), expect, rtol=1e-12, atol=1e-12)
    args = [x, w] if b is None else [x, w, b]
    gradcheck(
        lambda *a: autograd.conv2d(*a[:2], a[2] if len(a) > 2 else None, stride, padding, dilation, groups),
        args,
    )


def test_filters_in_the_product_layout_give_the_same_bits_without_a_copy():
    """conv_slices.product_layout: the same values as a view of (O, kh, kw, C) memory, which
    the pixel-major forward multiplies as it is (no filter copy), with equal bits;
    grouped and few-channel convolutions keep W as it is; laying out twice is a no-op."""
    from singa.kernels import conv_slices

    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 6, 7, 7)).astype(np.float32)
    W = rng.standard_normal((5, 6, 3, 3)).astype(np.float32)
    op = Conv2d((3, 3), pads=(1, 1, 1, 1))
    op.requires_grad = False
    laid = conv_slices.product_layout(W)
    np.testing.assert_array_equal(laid, W)
    assert laid.transpose(0, 2, 3, 1).flags.c_contiguous and not np.shares_memory(laid, W)
    assert np.shares_memory(conv_slices.product_layout(laid), laid)
    view = conv_slices.laid_out(np, laid.transpose(0, 2, 3, 1), (5, 54))
    assert np.shares_memory(view, laid)
    want = op.forward(x, W)
    got = op.forward(x, laid)
    assert got.shape == want.shape and got.tobytes(order="A") == want.tobytes(order="A")
    narrow = W[:, :4].copy()
    assert conv_slices.product_layout(narrow) is narrow
    grouped = rng.standard_normal((6, 3, 3, 3)).astype(np.float32)
    assert conv_slices.product_layout(grouped, groups=2) is grouped


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize(
    "geo", [(3, 3, 1, 1, 1, 1, 6, 5), (2, 3, 2, 1, 1, 2, 4, 3), (3, 2, 2, 3, 2, 1, 3, 4)]
)
def test_col2im_offsets_adds_every_offset_in_order(dtype, geo):
    """col2im_offsets (compiled for float32/64, array additions for float16) equals
    adding each kernel offset's columns into dx in turn, bit for bit."""
    from singa.kernels import im2col as im

    kh, kw, sh, sw, dh, dw, oh, ow = geo
    rng = np.random.default_rng(5)
    n, c = 2, 3
    hp, wp = (oh - 1) * sh + (kh - 1) * dh + 2, (ow - 1) * sw + (kw - 1) * dw + 1
    dcols = rng.standard_normal((kh, kw, n, oh, ow, c)).astype(dtype)
    start = rng.standard_normal((n, hp, wp, c)).astype(dtype)
    want = start.copy()
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
            cols = slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)
            want[:, rows, cols] += dcols[i, j]
    got = start.copy()
    im.col2im_offsets(dcols, got, *geo)
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("with_bias, relu", [(True, True), (True, False), (False, True)])
def test_bias_and_relu_in_one_pass_as_the_operators_compute_them(dtype, with_bias, relu):
    """finish_rows on the CPU: out + bias rounded as numpy adds, then ReLU as the
    ReLU operator gives it (+0.0 for -0.0 and negatives, NaN kept)."""
    from singa.autograd.activation import ReLU
    from singa.kernels import im2col as im

    rng = np.random.default_rng(9)
    out = rng.standard_normal((7, 5)).astype(dtype)
    out[0, :3] = [-0.0, np.nan, 0.0]
    bias = rng.standard_normal(5).astype(dtype) if with_bias else None
    want = out + bias if with_bias else out.copy()
    if relu:
        op = ReLU()
        op.requires_grad = False
        want = op.forward(want)
    got = out.copy()
    im.finish_rows(np, got, None if bias is None else bias.copy(), relu=relu)
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("with_bias, relu", [(True, True), (False, True), (True, False)])
def test_bias_residual_and_relu_in_one_pass_round_as_three_operations(dtype, with_bias, relu):
    """finish_rows with a residual: (out + bias) + residual, each sum rounded as
    numpy rounds it, then ReLU; the compiled pass and the array path (a residual
    that is not in C order) agree."""
    from singa.kernels import im2col as im

    rng = np.random.default_rng(10)
    out = rng.standard_normal((6, 4)).astype(dtype)
    res = rng.standard_normal((6, 4)).astype(dtype)
    out[0, :2], res[0, :2] = [np.nan, 1.0], [1.0, -1.0]
    bias = rng.standard_normal(4).astype(dtype) if with_bias else None
    want = (out + bias if with_bias else out) + res
    want = np.maximum(want, 0) if relu else want
    for residual in (res, np.asfortranarray(res)):
        got = out.copy()
        im.finish_rows(np, got, bias, residual=residual, relu=relu)
        assert got.tobytes() == want.tobytes()
    assert np.isnan(want[0, 0]) and (want[0] == 0).any() == relu


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("pads", [(1, 1, 1, 1), (2, 0, 1, 3), (0, 2, 0, 0)])
def test_zero_border_zeroes_the_border_only(dtype, pads):
    """zero_border: the compiled pass (C-ordered floats) and the slice assignments
    (any other array) both zero exactly the cells outside the (H, W) middle."""
    from singa.kernels import im2col as im

    t, l, b, r = pads
    h, w = 3, 4
    start = np.random.default_rng(11).standard_normal((2, h + t + b, w + l + r, 3)).astype(dtype) + 5
    want = np.zeros_like(start)
    want[:, t : t + h, l : l + w] = start[:, t : t + h, l : l + w]
    compiled = start.copy()
    im.zero_border(compiled, h, w, pads)
    strided = np.asfortranarray(start)
    im.zero_border(strided, h, w, pads)
    assert compiled.tobytes() == want.tobytes()
    np.testing.assert_array_equal(strided, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_finish_rows_affine_gives_batchnorm_evaluations_bits(dtype):
    """finish_rows with BatchNorm's eval_coefficients, after a bias: the bits of the
    bias added, then BatchNorm2d's evaluation forward (on NHWC memory), then ReLU."""
    from singa.autograd.activation import ReLU
    from singa.autograd.normalization import BatchNorm2d
    from singa.kernels import im2col as im

    rng = np.random.default_rng(12)
    n, h, w, c = 2, 3, 5, 6
    rows = (rng.standard_normal((n * h * w, c)) * 3).astype(dtype)
    bias = rng.standard_normal(c).astype(dtype)
    scale, beta = (rng.random(c) + 0.5).astype(dtype), rng.standard_normal(c).astype(dtype)
    mean, var = rng.standard_normal(c).astype(dtype), (rng.random(c) + 0.1).astype(dtype)
    bn = BatchNorm2d(training=False)
    bn.requires_grad = False
    relu = ReLU()
    relu.requires_grad = False
    y = (rows + bias).reshape(n, h, w, c).transpose(0, 3, 1, 2)  # NCHW view, NHWC memory
    want = relu.forward(bn.forward(y, scale, beta, mean, var))
    for compiled in (True, False):
        got = rows.copy() if compiled else np.asfortranarray(rows)  # F order: the array path
        im.finish_rows(np, got, bias, bn.eval_coefficients(scale, beta, mean, var, dtype), relu=True)
        assert got.reshape(n, h, w, c).transpose(0, 3, 1, 2).tobytes() == np.ascontiguousarray(want).tobytes()
    assert (want == 0).any() and (want > 0).any()
