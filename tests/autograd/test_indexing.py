"""Indexing operators: gather, where, getitem."""

import numpy as np
import pytest
from gpu_compare import assert_gpu_matches_cpu  # noqa: I001

from singa import autograd
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor

rng = np.random.default_rng(0)


def const(a, dtype=np.float64):
    return Tensor(data=np.asarray(a), dtype=dtype, requires_grad=False)


def randn(*shape):
    return rng.standard_normal(shape)


# ----- gather ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "axis,indices",
    [(0, [2, 0, 2, 2]), (1, [[0, 1], [3, 3]]), (-1, 1), (2, np.array([-1, 0, -1])), (1, [])],
)
def test_gather(axis, indices):
    x = randn(3, 4, 2)
    y = autograd.gather(const(x), axis, indices)
    expect = np.take(x, np.asarray(indices, dtype=np.int64), axis=axis)
    assert y.shape == expect.shape
    np.testing.assert_array_equal(y.to_numpy(), expect)
    gradcheck(lambda x: autograd.gather(x, axis, indices), [x])


def test_gather_tensor_indices_and_repeated_scatter_add():
    x = Tensor(data=np.arange(4.0), dtype=np.float64, requires_grad=True, stores_grad=True)
    idx = Tensor(data=[3, 1, 3, 3], dtype=np.int64)  # requires_grad defaults to True: still no gradient
    y = autograd.gather(x, 0, idx)
    np.testing.assert_array_equal(y.to_numpy(), [3, 1, 3, 3])
    g = autograd.gradients(y, dy=np.array([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_array_equal(g[x].to_numpy(), [0, 2, 0, 8])
    with pytest.raises(ValueError, match="gather"):
        autograd.gather(x, 0, [4])
    with pytest.raises(ValueError, match="gather"):
        autograd.gather(x, 0, [-5])
    with pytest.raises(ValueError, match="gather"):
        autograd.gather(x, 1, [0])


# ----- where ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "sx,sy,sc",
    [((3, 4), (3, 4), (3, 4)), ((3, 1), (4,), (3, 4)), ((3, 4), (3, 4), (4,)), ((1,), (2, 3), (2, 1))],
)
def test_where(sx, sy, sc):
    x, y = randn(*sx), randn(*sy)
    c = rng.random(sc) > 0.5
    out = autograd.where(const(x), const(y), c)
    np.testing.assert_array_equal(out.to_numpy(), np.where(c, x, y))
    gradcheck(lambda x, y: autograd.where(x, y, c), [x, y])
    # a numeric Tensor condition: nonzero means true
    cn = const(c.astype(np.float32) * 3, np.float32)
    np.testing.assert_array_equal(autograd.where(const(x), const(y), cn).to_numpy(), np.where(c, x, y))


def test_where_number_operand_and_error():
    x = randn(2, 3)
    c = x > 0
    np.testing.assert_array_equal(autograd.where(const(x), 0.0, c).to_numpy(), np.where(c, x, 0.0))
    gradcheck(lambda x: autograd.where(x, 0.0, c), [x])
    with pytest.raises(ValueError, match="where"):
        autograd.where(const(x), const(np.ones((4,))), c)


# ----- getitem -------------------------------------------------------------------------------
KEYS = [
    1,
    -1,
    np.s_[1:3],
    np.s_[::-1, 2],
    np.s_[..., 1],
    np.s_[None, 0, :, ::2],
    np.s_[1, 2, 3],
    np.s_[:, None, -2:],
    (Ellipsis,),
]


@pytest.mark.parametrize("key", KEYS)
def test_getitem_basic(key):
    x = randn(3, 4, 5)
    y = const(x)[key]
    np.testing.assert_array_equal(y.to_numpy(), x[key])
    gradcheck(lambda x: x[key], [x])


@pytest.mark.parametrize("key", [([0, 2, 0],), np.s_[:, [1, 1, 3]], (np.array([True, False, True]),)])
def test_getitem_advanced_accumulates(key):
    x = randn(3, 4)
    np.testing.assert_array_equal(const(x)[key].to_numpy(), x[key])
    gradcheck(lambda x: x[key], [x])


def test_getitem_index_error():
    with pytest.raises(IndexError):
        const(np.ones((2, 3)))[5]


# ----- GPU (cupy) path: the same operators compared with the CPU (skipped without a GPU) -----
@pytest.mark.gpu
@pytest.mark.parametrize(
    "fn",
    [
        lambda x: autograd.gather(x, 1, [3, 0, 3, -1]),
        lambda x: autograd.where(x, 0.5, np.arange(5) % 2 == 0),
        lambda x: x[1:, None, [0, 2, 2], ::-2],
    ],
)
def test_gpu_matches_cpu(fn):
    assert_gpu_matches_cpu(fn, [randn(3, 4, 5).astype(np.float32)])
