"""N-D / dilated pooling (singa.autograd.pooling_nd): forward and indices against a
direct-loop reference, gradients against finite differences, dispatch, errors."""

import itertools

import numpy as np
import pytest
from gpu_compare import assert_gpu_matches_cpu, gpu_or_skip  # noqa: I001

from singa import autograd
from singa.autograd.gradcheck import gradcheck
from singa.autograd.pooling import AvgPool2d, MaxPool2d
from singa.autograd.pooling_nd import AvgPoolNd, MaxPoolNd
from singa.tensor import Tensor


def T(a, grad=True):
    return Tensor(data=a, dtype=a.dtype, requires_grad=grad, stores_grad=grad)


def tup(v, nd):
    return (v,) * nd if np.isscalar(v) else tuple(v)


def out_len(n, k, s, d, p0, p1, ceil):
    span = n + p0 + p1 - (k - 1) * d - 1
    if not ceil:
        return span // s + 1
    o = -(-span // s) + 1
    return o - 1 if (o - 1) * s >= n + p0 else o


def ref_pool(x, kind, kernel, stride=None, padding=0, dilation=1, ceil=False, cip=True, order=0):
    """Direct loops over output cells and window cells (PyTorch/ONNX rules). Returns
    (y, indices) for "max", y for "avg"."""
    nd = x.ndim - 2
    k, d = tup(kernel, nd), tup(dilation, nd)
    s = k if stride is None else tup(stride, nd)
    p = tup(padding, nd)
    p = p + p if len(p) == nd else p
    sizes = x.shape[2:]
    outs = [out_len(sizes[a], k[a], s[a], d[a], p[a], p[a + nd], ceil) for a in range(nd)]
    y = np.zeros(x.shape[:2] + tuple(outs))
    idx = np.zeros(y.shape, dtype=np.int64)
    for nb, c in itertools.product(range(x.shape[0]), range(x.shape[1])):
        for o in itertools.product(*(range(n) for n in outs)):
            best, where, total, count = None, None, 0.0, 0
            for js in itertools.product(*(range(kk) for kk in k)):
                pos = [o[a] * s[a] - p[a] + js[a] * d[a] for a in range(nd)]
                real = all(0 <= pos[a] < sizes[a] for a in range(nd))
                in_pad = all(-p[a] <= pos[a] < sizes[a] + p[a + nd] for a in range(nd))
                if real:
                    v = x[(nb, c) + tuple(pos)]
                    total += v
                    if best is None or v > best:
                        best, where = v, pos
                count += real if not cip else in_pad
            if kind == "max":
                y[(nb, c) + o] = best
                strides = [int(np.prod(sizes[a + 1 :])) for a in range(nd)]
                if order == 1:
                    strides = [int(np.prod(sizes[:a])) for a in range(nd)]
                flat = sum(w * m for w, m in zip(where, strides))
                idx[(nb, c) + o] = (nb * x.shape[1] + c) * int(np.prod(sizes)) + flat
            else:
                y[(nb, c) + o] = total / count
    return (y, idx) if kind == "max" else y


def distinct(shape, seed=0):
    """Values far apart from each other, so max pooling has no ties near the maximum."""
    rng = np.random.default_rng(seed)
    return rng.permutation(int(np.prod(shape))).reshape(shape).astype(np.float64) * 0.1 - 3.0


# shape, kernel, stride, padding, dilation, ceil
CASES = [
    ((2, 2, 9), 3, 2, 1, 2, False),
    ((1, 2, 10), 2, 3, (0, 1), 3, True),
    ((2, 1, 6, 7), 2, 1, 0, 2, False),
    ((1, 2, 7, 8), (3, 2), (2, 3), (1, 0, 2, 1), (2, 1), True),
    ((1, 2, 4, 5, 6), 2, None, 0, 1, False),
    ((1, 1, 5, 6, 5), (2, 3, 2), (2, 1, 2), (1, 1, 0, 0, 1, 1), (2, 1, 1), True),
    ((2, 1, 5, 5, 5), 2, 1, 1, 2, False),
]


@pytest.mark.parametrize("shape, k, s, p, d, ceil", CASES)
@pytest.mark.parametrize("order", [0, 1])
def test_max_forward_and_indices(shape, k, s, p, d, ceil, order):
    x = distinct(shape)
    y, idx = autograd.max_pool_nd(T(x), k, s, p, d, ceil, return_indices=True, storage_order=order)
    want_y, want_idx = ref_pool(x, "max", k, s, p, d, ceil, order=order)
    np.testing.assert_array_equal(y.to_numpy(), want_y)
    assert idx.dtype == np.int64
    np.testing.assert_array_equal(idx.to_numpy(), want_idx)
    if order == 0:  # the indices address the winning cells of the flattened input
        np.testing.assert_array_equal(x.reshape(-1)[idx.to_numpy()], want_y)
    np.testing.assert_array_equal(autograd.max_pool_nd(T(x), k, s, p, d, ceil).to_numpy(), want_y)


@pytest.mark.parametrize("shape, k, s, p, d, ceil", CASES)
@pytest.mark.parametrize("cip", [False, True])
def test_avg_forward(shape, k, s, p, d, ceil, cip):
    x = np.random.default_rng(1).standard_normal(shape)
    y = autograd.avg_pool_nd(T(x), k, s, p, d, ceil, cip).to_numpy()
    np.testing.assert_allclose(y, ref_pool(x, "avg", k, s, p, d, ceil, cip), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape, k, s, p, d, ceil", CASES)
def test_max_gradcheck(shape, k, s, p, d, ceil):
    gradcheck(lambda a: autograd.max_pool_nd(a, k, s, p, d, ceil), [distinct(shape, 3)])


@pytest.mark.parametrize("shape, k, s, p, d, ceil", CASES)
@pytest.mark.parametrize("cip", [False, True])
def test_avg_gradcheck(shape, k, s, p, d, ceil, cip):
    x = np.random.default_rng(2).standard_normal(shape)
    gradcheck(lambda a: autograd.avg_pool_nd(a, k, s, p, d, ceil, cip), [x])


def test_max_gradcheck_with_indices_output():
    x = distinct((1, 2, 4, 5, 4), 5)
    gradcheck(lambda a: autograd.max_pool_nd(a, 2, 1, 1, 2, return_indices=True)[0], [x])


def test_3d_wrappers_match_nd():
    x = np.random.default_rng(4).standard_normal((2, 2, 5, 4, 6))
    args = ((2, 3, 2), (1, 2, 2), 1, (2, 1, 1), True)
    np.testing.assert_array_equal(autograd.max_pool_3d(T(x), *args).to_numpy(), ref_pool(x, "max", *args)[0])
    np.testing.assert_allclose(
        autograd.avg_pool_3d(T(x), *args, count_include_pad=False).to_numpy(),
        ref_pool(x, "avg", *args, cip=False),
        atol=1e-12,
    )
    gradcheck(lambda a: autograd.avg_pool_3d(a, 2, 1, 0, 2), [x[:1, :1]])


def test_ties_and_padding():
    # ties: the first maximum (row-major in the window) gets the gradient and the index
    x = np.ones((1, 1, 2, 2, 2))
    y, idx = autograd.max_pool_nd(T(x), 2, return_indices=True)
    assert int(idx.to_numpy().reshape(())) == 0
    (_, dx), *_ = autograd.backward(y)
    assert dx.to_numpy().reshape(-1).tolist() == [1, 0, 0, 0, 0, 0, 0, 0]
    # -inf inputs: a padded cell never wins, the index names a real cell
    x = np.full((1, 1, 3, 3, 3), -np.inf)
    y, idx = autograd.max_pool_nd(T(x, False), 2, 2, 1, return_indices=True)
    assert np.all(y.to_numpy() == -np.inf)
    assert idx.to_numpy().min() >= 0 and idx.to_numpy().max() < 27
    # a NaN maximum gets index -1
    x = np.zeros((1, 1, 4, 4))
    x[0, 0, 0, 0] = np.nan
    y, idx = autograd.max_pool_nd(T(x, False), 2, dilation=1, return_indices=True)
    assert np.isnan(y.to_numpy()[0, 0, 0, 0]) and idx.to_numpy()[0, 0, 0, 0] == -1


def test_dispatch_and_attributes():
    x = T(np.zeros((1, 2, 8, 8)))
    assert isinstance(autograd.max_pool_nd(x, 2).creator, MaxPool2d)
    assert isinstance(autograd.avg_pool_nd(x, 3, 1, 1).creator, AvgPool2d)
    assert isinstance(autograd.avg_pool_nd(T(np.zeros((1, 2, 8))), 3, 1, 1).creator, AvgPool2d)
    op = autograd.max_pool_nd(x, 2, 1, (1, 0, 0, 1), 2, True).creator
    assert isinstance(op, MaxPoolNd)
    assert op.kernel_size == (2, 2) and op.stride == (1, 1) and op.pads == (1, 0, 0, 1)
    assert op.dilation == (2, 2) and op.ceil_mode and not op.return_indices
    op = autograd.max_pool_nd(x, 2, return_indices=True, storage_order=1)[0].creator
    assert isinstance(op, MaxPoolNd) and op.return_indices and op.storage_order == 1
    op = autograd.avg_pool_nd(T(np.zeros((1, 1, 4, 4, 4))), (1, 2, 3), padding=(0, 1, 1)).creator
    assert isinstance(op, AvgPoolNd)
    assert op.kernel_size == (1, 2, 3) and op.stride == (1, 2, 3) and op.pads == (0, 1, 1, 0, 1, 1)
    assert op.dilation == (1, 1, 1) and not op.count_include_pad  # SINGA's default


def test_float32_is_preserved():
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 4, 4)).astype(np.float32)
    y = autograd.avg_pool_nd(T(x), 2, 1, 1, 2)
    assert y.dtype == np.float32
    (_, dx), *_ = autograd.backward(autograd.reduce_sum(y, None, 0))
    assert dx.dtype == np.float32
    assert autograd.max_pool_nd(T(x), 3, 2, 1).dtype == np.float32


@pytest.mark.parametrize(
    "fn, shape, args, kwargs, match",
    [
        (autograd.max_pool_nd, (2, 3), (2,), {}, r"max_pool_nd: x must be \(N, C, D1, \.\.\.\)"),
        (autograd.max_pool_3d, (1, 1, 4, 4), (2,), {}, r"max_pool_3d: x must be \(N, C, D1, D2, D3\)"),
        (autograd.avg_pool_nd, (1, 1, 4, 4), ((2, 2, 2),), {}, r"kernel_size must be an int or 2 ints"),
        (autograd.avg_pool_nd, (1, 1, 4, 4, 4), (2, 1, (1, 1, 1, 1)), {}, r"padding must be an int, 3 ints"),
        (autograd.max_pool_nd, (1, 1, 4, 4), (2,), {"dilation": 0}, r"dilation must be >= 1"),
        (autograd.max_pool_nd, (1, 1, 4, 4), (2, 1, -1), {}, r"padding must be >= 0"),
        (autograd.max_pool_nd, (1, 1, 3, 4, 4), (2, 1, 0, 3), {}, r"max_pool_nd: output would be empty"),
        (
            autograd.avg_pool_nd,
            (1, 1, 4),
            (2, 2, (3, 0)),
            {},
            r"window 0 along spatial axis 0 holds only padding",
        ),
        (autograd.max_pool_nd, (1, 1, 4), (2,), {"storage_order": 2}, r"storage_order must be 0 or 1"),
    ],
)
def test_errors(fn, shape, args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        fn(T(np.zeros(shape)), *args, **kwargs)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "fn",
    [
        lambda t: autograd.max_pool_nd(t, 2, 1, 1, 2, True),
        lambda t: autograd.avg_pool_nd(t, (2, 3, 2), 2, (1, 0, 1, 0, 1, 1), 1, True, False),
        lambda t: autograd.avg_pool_nd(t, 2, 1, 0, (2, 1, 2), False, True),
    ],
)
def test_gpu_matches_cpu(fn):
    assert_gpu_matches_cpu(fn, [distinct((2, 2, 5, 6, 5), 7).astype(np.float32)])


@pytest.mark.gpu
def test_gpu_indices_match_cpu():
    gpu = gpu_or_skip()
    x = distinct((2, 2, 5, 6, 5), 8).astype(np.float32)
    for order in (0, 1):
        outs = []
        for dev in (None, gpu):
            t = Tensor(data=x, device=dev, requires_grad=False)
            y, i = autograd.max_pool_nd(t, 3, 2, 1, (1, 2, 1), True, return_indices=True, storage_order=order)
            outs.append((y.to_numpy(), i.to_numpy()))
        np.testing.assert_array_equal(outs[1][0], outs[0][0])
        np.testing.assert_array_equal(outs[1][1], outs[0][1])
