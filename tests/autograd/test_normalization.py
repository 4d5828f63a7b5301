"""Normalization: batchnorm_2d (training and eval, 2-D and 4-D) and layer_norm."""

import numpy as np
import pytest
from gpu_compare import assert_gpu_matches_cpu  # noqa: I001

from singa import autograd
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor

rng = np.random.default_rng(0)


def const(a, dtype=np.float64):
    return Tensor(data=np.asarray(a), dtype=dtype, requires_grad=False)


def bn_inputs(shape, dtype=np.float64):
    c = shape[1]
    x = rng.standard_normal(shape) * 2 + 0.5
    scale, bias = rng.standard_normal(c), rng.standard_normal(c)
    rm, rv = rng.standard_normal(c), rng.uniform(0.5, 2.0, c)
    return [a.astype(dtype) for a in (x, scale, bias, rm, rv)]


def bn_ref(x, scale, bias, mean, var, eps=1e-5):
    b = (1, -1) + (1,) * (x.ndim - 2)
    return (x - mean.reshape(b)) / np.sqrt(var.reshape(b) + eps) * scale.reshape(b) + bias.reshape(b)


def chan_axes(x):
    return (0,) + tuple(range(2, x.ndim))


SHAPES = [(4, 3, 2, 3), (5, 2), (3, 2, 1, 1), (2, 3, 5)]


@pytest.mark.parametrize("shape", SHAPES)
def test_batchnorm_training_forward_and_running_stats_in_place(shape):
    x, scale, bias, rm, rv = bn_inputs(shape)
    rm_t, rv_t = const(rm), const(rv)
    rm_arr, rv_arr = rm_t.data, rv_t.data
    y = autograd.batchnorm_2d(const(x), const(scale), const(bias), rm_t, rv_t, momentum=0.8, training=True)
    ax = chan_axes(x)
    mean, var = x.mean(axis=ax), x.var(axis=ax)
    np.testing.assert_allclose(y.to_numpy(), bn_ref(x, scale, bias, mean, var), rtol=1e-10, atol=1e-12)
    m = x.size // x.shape[1]
    # running = momentum * running + (1 - momentum) * batch_stat, unbiased variance
    np.testing.assert_allclose(rm_t.data, 0.8 * rm + 0.2 * mean, rtol=1e-12)
    np.testing.assert_allclose(rv_t.data, 0.8 * rv + 0.2 * var * m / (m - 1), rtol=1e-12)
    np.testing.assert_allclose(rv_t.data, 0.8 * rv + 0.2 * x.var(axis=ax, ddof=1), rtol=1e-12)
    assert rm_t.data is rm_arr and rv_t.data is rv_arr  # updated in place, never rebound


@pytest.mark.parametrize("shape", SHAPES)
def test_batchnorm_eval_forward_uses_running_stats(shape):
    x, scale, bias, rm, rv = bn_inputs(shape)
    rm_t, rv_t = const(rm), const(rv)
    y = autograd.batchnorm_2d(const(x), const(scale), const(bias), rm_t, rv_t, training=False)
    np.testing.assert_allclose(y.to_numpy(), bn_ref(x, scale, bias, rm, rv), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(rm_t.data, rm)
    np.testing.assert_array_equal(rv_t.data, rv)


@pytest.mark.parametrize("shape", [(3, 2, 2, 3), (4, 3), (2, 2, 7), (2, 2, 6, 6)])
@pytest.mark.parametrize("mode", [True, False])
def test_batchnorm_gradcheck(shape, mode):
    inputs = bn_inputs(shape)

    def f(x, s, b, rm, rv):
        return autograd.batchnorm_2d(x, s, b, rm, rv, momentum=0.7, training=mode)

    gradcheck(f, inputs, wrt=[0, 1, 2])


def test_batchnorm_only_x_needs_grad_and_training_flag_default():
    x, scale, bias, rm, rv = bn_inputs((3, 2, 2, 2))
    xt = Tensor(data=x, dtype=np.float64, requires_grad=True, stores_grad=True)
    args = [const(scale), const(bias), const(rm), const(rv)]
    g = autograd.gradients(autograd.batchnorm_2d(xt, *args), dy=np.ones(x.shape))
    assert set(g) == {id(xt)}
    # sum(y) does not depend on x in training mode (y is centred per channel)
    np.testing.assert_allclose(g[xt].to_numpy(), 0, atol=1e-12)
    autograd.training = False
    assert not np.allclose(args[2].data, rm)  # the training call moved the running mean
    rm_now, rv_now = args[2].data.copy(), args[3].data.copy()
    y = autograd.batchnorm_2d(const(x), *args)  # follows autograd.training: eval mode
    np.testing.assert_array_equal(args[2].data, rm_now)
    np.testing.assert_allclose(y.to_numpy(), bn_ref(x, scale, bias, rm_now, rv_now), rtol=1e-10)


def test_batchnorm_direct_backward_gives_x_scale_and_bias_gradients_only():
    """SINGA's tests unpack ``dx, ds, db = y.creator.backward(dy)``: the running
    statistics get no gradient and are left off."""
    x, scale, bias, rm, rv = bn_inputs((2, 3, 2, 2))
    ts = [Tensor(data=a, dtype=np.float64) for a in (x, scale, bias)]  # require gradients
    y = autograd.batchnorm_2d(*ts, const(rm), const(rv))
    dy = rng.standard_normal(x.shape)
    dx, ds, db = y.creator.backward(dy)
    assert dx.shape == x.shape and ds.shape == db.shape == (3,)
    np.testing.assert_allclose(db, dy.sum(axis=(0, 2, 3)), rtol=1e-12)
    xhat = (x - x.mean(axis=(0, 2, 3), keepdims=True)) / np.sqrt(x.var(axis=(0, 2, 3), keepdims=True) + 1e-5)
    np.testing.assert_allclose(ds, (dy * xhat).sum(axis=(0, 2, 3)), rtol=1e-9)


def test_batchnorm_float32_and_large_mean():
    x, scale, bias, rm, rv = bn_inputs((8, 4, 5, 5), np.float32)
    x = x + np.float32(10.0)
    rm_t = const(rm, np.float32)
    y = autograd.batchnorm_2d(
        const(x, np.float32),
        const(scale, np.float32),
        const(bias, np.float32),
        rm_t,
        const(rv, np.float32),
        training=True,
    )
    assert y.dtype == np.float32 and rm_t.dtype == np.float32
    x64 = x.astype(np.float64)
    ref = bn_ref(x64, scale, bias, x64.mean(axis=(0, 2, 3)), x64.var(axis=(0, 2, 3)))
    np.testing.assert_allclose(y.to_numpy(), ref, atol=2e-5)


def test_batchnorm_backward_matches_float64_in_float32():
    x, scale, bias, rm, rv = bn_inputs((8, 4, 6, 6))
    dy = rng.standard_normal(x.shape)
    out = {}
    for dt in (np.float64, np.float32):
        ts = [Tensor(data=a, dtype=dt, requires_grad=True, stores_grad=True) for a in (x, scale, bias)]
        y = autograd.batchnorm_2d(*ts, const(rm, dt), const(rv, dt), training=True)
        g = autograd.gradients(y, dy=dy.astype(dt))
        out[dt] = [g[t].to_numpy() for t in ts]
        assert all(a.dtype == dt for a in out[dt])
    for a, b in zip(out[np.float64], out[np.float32]):
        np.testing.assert_allclose(b, a, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_batchnorm_float32_gradients_with_a_large_mean(layout):
    """Backward centres x before its products: a channel mean 1000 times its spread
    costs float32 no more than ~1e-4 of relative accuracy in the scale gradient."""
    r = np.random.default_rng(7)
    x = r.standard_normal((16, 4, 8, 8)) + 1000.0
    scale, bias = r.uniform(0.5, 2.0, 4), r.standard_normal(4)
    dy = r.standard_normal(x.shape)
    out = {}
    for dt in (np.float64, np.float32):
        xa = x.astype(dt)
        xa = nhwc(xa) if layout == "nhwc" else xa
        ts = [Tensor(data=a, dtype=dt, requires_grad=True, stores_grad=True) for a in (xa, scale, bias)]
        y = autograd.batchnorm_2d(*ts, const(np.zeros(4), dt), const(np.ones(4), dt), training=True)
        g = autograd.gradients(y, dy=dy.astype(dt))
        out[dt] = [g[t].to_numpy().astype(np.float64) for t in ts]
    (dx64, ds64, _), (dx32, ds32, _) = out[np.float64], out[np.float32]
    assert np.abs(ds32 - ds64).max() / np.abs(ds64).max() < 1.5e-4
    assert np.abs(dx32 - dx64).max() / np.abs(dx64).max() < 1e-5


def test_batchnorm_errors():
    x = const(np.ones((2, 3, 2, 2)))
    ok = const(np.ones(3))
    with pytest.raises(ValueError, match=r"batchnorm_2d.*scale.*\(4,\)"):
        autograd.batchnorm_2d(x, const(np.ones(4)), ok, ok, ok)
    with pytest.raises(ValueError, match="running_var"):
        autograd.batchnorm_2d(x, ok, ok, ok, const(np.ones((1, 3))))
    with pytest.raises(ValueError, match="batchnorm_2d"):
        autograd.batchnorm_2d(const(np.ones(3)), ok, ok, ok, ok)
    with pytest.raises(ValueError, match="more than one value"):
        autograd.batchnorm_2d(const(np.ones((1, 3))), ok, ok, ok, ok, training=True)
    autograd.batchnorm_2d(const(np.ones((1, 3))), ok, ok, ok, ok, training=False)  # fine in eval


# ----- layer_norm ----------------------------------------------------------------------------
def ln_ref(x, scale, bias, axis, eps=1e-5):
    ax = tuple(range(axis % x.ndim, x.ndim))
    m, v = x.mean(axis=ax, keepdims=True), x.var(axis=ax, keepdims=True)
    y = (x - m) / np.sqrt(v + eps) * scale
    return y if bias is None else y + bias


@pytest.mark.parametrize(
    "shape,axis,sshape,bshape",
    [
        ((3, 5), -1, (5,), (5,)),
        ((2, 3, 4), -1, (4,), (4,)),
        ((2, 3, 4), 1, (3, 4), (3, 4)),
        ((2, 3, 4), -2, (3, 4), (4,)),  # bias broadcast over the normalised shape
        ((2, 3, 4), 0, (2, 3, 4), None),  # everything normalised, no bias
        ((4, 6), 1, (1,), (6,)),
    ],
)
def test_layer_norm(shape, axis, sshape, bshape):
    x = rng.standard_normal(shape)
    s = rng.standard_normal(sshape)
    b = None if bshape is None else rng.standard_normal(bshape)
    y = autograd.layer_norm(const(x), const(s), None if b is None else const(b), axis)
    np.testing.assert_allclose(y.to_numpy(), ln_ref(x, s, b, axis), rtol=1e-10, atol=1e-12)
    if b is None:
        gradcheck(lambda x, s: autograd.layer_norm(x, s, None, axis), [x, s])
    else:
        gradcheck(lambda x, s, b: autograd.layer_norm(x, s, b, axis), [x, s, b])


def test_layer_norm_float32_and_errors():
    x = rng.standard_normal((4, 8)).astype(np.float32)
    y = autograd.layer_norm(
        const(x, np.float32), const(np.ones(8), np.float32), const(np.zeros(8), np.float32)
    )
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.to_numpy(), ln_ref(x.astype(np.float64), 1.0, 0.0, -1), atol=1e-5)
    with pytest.raises(ValueError, match=r"layer_norm.*scale.*\(4,\)"):
        autograd.layer_norm(const(x), const(np.ones(4)), None)
    with pytest.raises(ValueError, match="layer_norm.*bias"):
        autograd.layer_norm(const(x), const(np.ones(8)), const(np.ones((4, 8))), axis=1)
    with pytest.raises(ValueError, match="layer_norm"):
        autograd.layer_norm(const(x), const(np.ones(8)), None, axis=2)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_])
def test_integer_and_bool_inputs_raise_naming_op_and_dtype(dtype):
    x = const(np.ones((2, 3, 2, 2)), dtype)
    ok = const(np.ones(3))
    msg = rf".*floating-point.*{np.dtype(dtype)}"
    with pytest.raises(ValueError, match="^batchnorm_2d: " + msg):
        autograd.batchnorm_2d(x, ok, ok, ok, ok, training=True)
    with pytest.raises(ValueError, match="^batchnorm_2d: " + msg):
        autograd.batchnorm_2d(x, ok, ok, ok, ok, training=False)
    with pytest.raises(ValueError, match="^layer_norm: " + msg):
        autograd.layer_norm(x, const(np.ones(2)), None)


# ----- GPU (cupy) path: the same operators compared with the CPU (skipped without a GPU) -----
@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(8, 3, 5, 5), (16, 4)])
@pytest.mark.parametrize("mode", [True, False])
def test_gpu_batchnorm_matches_cpu(shape, mode):
    x, scale, bias, rm, rv = bn_inputs(shape, np.float32)
    stats = []  # running statistics of the CPU run, then of the GPU run

    def f(x, s, b):
        dev = x.device
        rm_t, rv_t = (
            Tensor(data=rm, device=dev, requires_grad=False),
            Tensor(data=rv, device=dev, requires_grad=False),
        )
        stats.append((rm_t, rv_t))
        return autograd.batchnorm_2d(x, s, b, rm_t, rv_t, training=mode)

    assert_gpu_matches_cpu(f, [x, scale, bias])
    for c, g in zip(*stats):
        np.testing.assert_allclose(g.to_numpy(), c.to_numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
def test_gpu_layer_norm_matches_cpu():
    x = rng.standard_normal((4, 3, 6)).astype(np.float32)
    s, b = rng.standard_normal((3, 6)).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    assert_gpu_matches_cpu(lambda x, s, b: autograd.layer_norm(x, s, b, 1), [x, s, b])


def test_layer_norm_keeps_x_dtype_with_float64_parameters():
    x = Tensor(data=rng.standard_normal((3, 4)), dtype=np.float32, requires_grad=True, stores_grad=True)
    s = Tensor(data=np.ones(4), dtype=np.float64, requires_grad=True, stores_grad=True)
    y = autograd.layer_norm(x, s, const(np.zeros(4)))
    assert y.dtype == np.float32
    g = autograd.gradients(y, dy=np.ones((3, 4), np.float32))
    assert g[x].dtype == np.float32 and g[s].shape == (4,)


def nhwc(a):
    """The same values as ``a`` (N, C, H, W) with NHWC memory (as conv2d outputs are)."""
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


@pytest.mark.parametrize("mode", [True, False])
@pytest.mark.parametrize("dy_layout", ["nchw", "nhwc"])
def test_batchnorm_nhwc_memory_matches_nchw(mode, dy_layout):
    from singa.kernels.im2col import is_channels_last

    x, scale, bias, rm, rv = bn_inputs((3, 4, 5, 2))
    dy = rng.standard_normal(x.shape)
    dy = nhwc(dy) if dy_layout == "nhwc" else dy
    results = []
    for xa in (x, nhwc(x)):
        xt = Tensor(data=xa, dtype=np.float64, requires_grad=True, stores_grad=True)
        params = [
            Tensor(data=a.copy(), dtype=np.float64, requires_grad=True, stores_grad=True)
            for a in (scale, bias)
        ]
        stats = [const(rm.copy()), const(rv.copy())]
        y = autograd.batchnorm_2d(xt, *params, *stats, momentum=0.8, training=mode)
        assert is_channels_last(y.data) == (xa is not x)  # the layout is kept
        g = autograd.gradients(y, dy=dy)
        results.append(
            [y.to_numpy(), g[xt].to_numpy(), *(g[p].to_numpy() for p in params), *(s.data for s in stats)]
        )
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", [True, False])
def test_batchnorm_gradcheck_between_convolutions(mode):
    # conv2d outputs NHWC memory and its backward hands BatchNorm NHWC gradients
    c = 3
    x = rng.standard_normal((2, 2, 4, 5))
    w1, w2 = rng.standard_normal((c, 2, 3, 3)), rng.standard_normal((2, c, 1, 1))
    s, b = rng.standard_normal(c), rng.standard_normal(c)
    rm, rv = rng.standard_normal(c), rng.uniform(0.5, 2.0, c)

    def f(x, w1, s, b, w2, rm, rv):
        y = autograd.batchnorm_2d(autograd.conv2d(x, w1, padding=1), s, b, rm, rv, training=mode)
        return autograd.conv2d(y, w2)

    gradcheck(f, [x, w1, s, b, w2, rm, rv], wrt=[0, 1, 2, 3, 4])


# ----- the CPU kernels: pieces, worker counts, accuracy -------------------------------------
def bn_run(x, dy, mode, dt=np.float32):
    """Outputs, gradients and running statistics of one batchnorm_2d call on ``x``."""
    c = x.shape[1]
    r = np.random.default_rng(3)
    xt = Tensor(data=x, dtype=dt, requires_grad=True, stores_grad=True)
    params = [Tensor(data=r.standard_normal(c), dtype=dt, requires_grad=True, stores_grad=True) for _ in "sb"]
    stats = [const(np.zeros(c), dt), const(np.ones(c), dt)]
    y = autograd.batchnorm_2d(xt, *params, *stats, momentum=0.8, training=mode)
    g = autograd.gradients(y, dy=dy.astype(dt))
    return [
        y.to_numpy(),
        g[xt].to_numpy(),
        *(g[p].to_numpy() for p in params),
        *(s.data.copy() for s in stats),
    ]


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("mode", [True, False])
@pytest.mark.parametrize(
    "shape,layout", [((9, 4, 5, 6), "nhwc"), ((9, 4, 5, 6), "nchw"), ((11, 7), "nchw"), ((9, 3, 10), "nchw")]
)
def test_batchnorm_same_bits_with_one_and_two_workers(monkeypatch, shape, layout, mode, dt):
    from singa.kernels import workers

    monkeypatch.setattr(workers, "PIECE_WORK", 64)  # several pieces even on small arrays
    r = np.random.default_rng(2)
    x, dy = r.standard_normal(shape) + 3.0, r.standard_normal(shape)
    if layout == "nhwc":
        x, dy = nhwc(x), nhwc(dy)
    assert len(workers.work_pieces(shape[0], 2 * x.size)) > 1
    runs = []
    for count in (1, 2):
        monkeypatch.setattr(workers, "_count", [count])
        runs.append(bn_run(x.astype(dt), dy, mode, dt))
    for a, b in zip(*runs):
        assert a.dtype == dt
        np.testing.assert_array_equal(a, b)
    ref = bn_run(x, dy, mode, np.float64)  # and the pieces agree with float64
    tol = {np.float16: 2e-2, np.float32: 1e-4, np.float64: 1e-10}[dt]
    for a, b in zip(runs[0], ref):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, np.abs(b).max()))


@pytest.mark.parametrize(
    "shape,layout", [((32, 6, 8, 8), "nhwc"), ((32, 6, 8, 8), "nchw"), ((128, 20), "nchw")]
)
def test_batchnorm_float32_statistics_stay_accurate(shape, layout):
    """One pass over x - k (k: the first samples' mean) keeps the batch statistics at
    float32 rounding, also with a large mean and a first sample far from the rest."""
    r = np.random.default_rng(5)
    x = r.standard_normal(shape) * 0.5 + 1000.0
    x[0] += 20.0  # 40 standard deviations out
    x32 = x.astype(np.float32)
    x32 = nhwc(x32) if layout == "nhwc" else x32
    c = shape[1]
    rm, rv = const(np.zeros(c), np.float32), const(np.ones(c), np.float32)
    ones, zeros = const(np.ones(c), np.float32), const(np.zeros(c), np.float32)
    autograd.batchnorm_2d(const(x32, np.float32), ones, zeros, rm, rv, momentum=0.0, training=True)
    ax = chan_axes(x)
    xr = x.astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(rm.data, xr.mean(axis=ax), rtol=1e-7)
    np.testing.assert_allclose(rv.data, xr.var(axis=ax, ddof=1), rtol=1e-6)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("n", [3, 12])
def test_batchnorm_shift_is_the_mean_of_the_first_samples(channels_last, n):
    """The per-channel shift of the one-pass statistics: the float64 mean of the first
    (at most eight) samples, in either memory layout."""
    from singa.autograd import normalization as N
    from singa.kernels import batchnorm

    x = np.random.default_rng(n).standard_normal((n, 5, 4, 3)).astype(np.float32) * 3 + 100
    if channels_last:
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    lay = N._layout(x)
    assert isinstance(lay, N._ChannelLast) == channels_last
    want = x[: min(n, 8)].astype(np.float64).mean(axis=(0, 2, 3))
    got = batchnorm.first_rows_mean(N._kernel_rows(lay, x), lay.blocks)  # float32 partial sums, float64 total
    np.testing.assert_allclose(got, want, rtol=1e-6)


# ----- rms_norm ------------------------------------------------------------------------------
def rms_ref(x, scale, axis, eps):
    axes = tuple(range(axis % x.ndim, x.ndim))
    y = x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps)
    return y if scale is None else y * scale


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_norm_forward_and_gradcheck(axis):
    x = rng.standard_normal((2, 3, 4)) + 0.5
    scale = rng.standard_normal(x.shape[axis:])
    y = autograd.rms_norm(const(x), const(scale), axis=axis, eps=1e-5).to_numpy()
    np.testing.assert_allclose(y, rms_ref(x, scale, axis, 1e-5), rtol=1e-12)
    gradcheck(lambda a, s: autograd.rms_norm(a, s, axis=axis, eps=1e-5), [x, scale])
    gradcheck(lambda a: autograd.rms_norm(a, None, axis=axis, eps=1e-3), [x])
    y = autograd.rms_norm(const(x), None, axis=axis).to_numpy()
    np.testing.assert_allclose(y, rms_ref(x, None, axis, 1e-6), rtol=1e-12)


def test_rms_norm_matches_torch_and_errors():
    try:
        import torch
        import torch.nn.functional as F
    except Exception:
        torch = None
    x = rng.standard_normal((2, 5, 6)).astype(np.float32)
    w = rng.standard_normal(6).astype(np.float32)
    if torch is not None:
        want = F.rms_norm(torch.from_numpy(x), (6,), torch.from_numpy(w), eps=1e-6).numpy()
        np.testing.assert_allclose(
            autograd.rms_norm(const(x, np.float32), const(w, np.float32)).to_numpy(), want, rtol=1e-5
        )
    with pytest.raises(ValueError, match="out of range"):
        autograd.rms_norm(const(x), None, axis=3)
    with pytest.raises(ValueError, match="does not fit"):
        autograd.rms_norm(const(x), const(np.ones(5)))
