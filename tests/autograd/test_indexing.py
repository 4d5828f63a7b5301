"""Indexing operators: gather, where, getitem; onehot, nonzero and scatter_elements
(values against numpy and ONNX's examples, float64 gradients, SINGA's class forms, errors)."""

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


def test_gather_direct_backward_returns_the_gradient_of_x_alone():
    y = autograd.gather(Tensor(data=np.arange(6.0).reshape(3, 2), dtype=np.float64), 0, [2, 2])
    dx = y.creator.backward(np.ones((2, 2)))  # SINGA's tests call this: one array, x's shape
    np.testing.assert_array_equal(dx, [[0, 0], [0, 0], [2, 2]])


# ----- embedding -----------------------------------------------------------------------------
def test_embedding_picks_rows_and_gradcheck_of_w():
    w = randn(5, 3)
    idx = np.array([[0, 4, 4], [2, 1, 0]])
    y = autograd.embedding(const(idx, np.int64), const(w))
    np.testing.assert_array_equal(y.to_numpy(), w[idx])
    gradcheck(lambda w: autograd.embedding(const(idx, np.int64), w), [w])
    yf = autograd.embedding(const(idx.astype(np.float32), np.float32), const(w))  # whole floats
    np.testing.assert_array_equal(yf.to_numpy(), w[idx])


def test_embedding_direct_backward_gives_zero_dx_and_summed_dw():
    x = Tensor(data=np.array([[1, 3], [3, 3]]), dtype=np.int64)  # requires a gradient by default
    w = Tensor(data=np.zeros((4, 2)), dtype=np.float64)
    y = autograd.embedding(x, w)
    dy = np.arange(8.0).reshape(2, 2, 2)
    dx, dw = y.creator.backward(dy)  # SINGA's (dx, dW) pair
    assert dx.shape == (2, 2) and not dx.any()
    np.testing.assert_array_equal(dw, [[0, 0], [0, 1], [0, 0], [2 + 4 + 6, 3 + 5 + 7]])


@pytest.mark.parametrize(
    "x,w,match",
    [
        ([[0, 4]], np.zeros((4, 2)), "out of range"),
        ([-1], np.zeros((4, 2)), "out of range"),
        ([0.5], np.zeros((4, 2)), "whole numbers"),
        ([0], np.zeros(4), "must be 2-D"),
    ],
)
def test_embedding_errors(x, w, match):
    with pytest.raises(ValueError, match=f"embedding: .*{match}"):
        autograd.embedding(const(x), const(w))


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


def test_where_direct_backward_gives_the_two_branch_gradients():
    x, y = Tensor(data=[[1.0, 2.0], [3.0, 4.0]]), Tensor(data=[[9.0, 8.0], [7.0, 6.0]])
    out = autograd.where(x, y, [[True, False], [True, True]])
    dx, dy = out.creator.backward(np.ones((2, 2), np.float32))  # the condition gets none
    np.testing.assert_array_equal(dx, [[1, 0], [1, 1]])
    np.testing.assert_array_equal(dy, [[0, 1], [0, 0]])


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


def T(a, dtype=None, requires_grad=False):
    a = np.asarray(a, dtype=dtype)
    return Tensor(data=a, dtype=a.dtype, requires_grad=requires_grad, stores_grad=requires_grad)


# ----- onehot ------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [-1, 0, 1, -2])
def test_onehot_matches_an_eye_lookup(axis):
    ind = np.array([[1, -1, 0], [2, 0, -3]])
    y = autograd.onehot(axis, T(ind), 3, [2.0, 5.0])
    want = np.moveaxis(np.eye(3)[ind % 3], -1, axis) * 3 + 2
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y.to_numpy(), want)


def test_onehot_depth_as_a_one_element_array_and_float_indices():
    """SINGA's test_onehot form: depth ``np.array([10.])``, float indices, axis 1, values
    (off, on) = (1, 3). (Its own reference calls ``np.arange(depth)`` on that array,
    which numpy >= 2.4 refuses; the operator itself takes it.)"""
    ind = np.array([[1, 9], [2, 4]], np.float32)
    y = autograd.onehot(1, T(ind), np.array([10], np.float32), np.array([1, 3], np.float32))
    want = np.where(np.arange(10)[None, :, None] == ind[:, None, :], 3.0, 1.0)
    assert y.shape == (2, 10, 2) and y.dtype == np.float32
    np.testing.assert_array_equal(y.to_numpy(), want)


def test_onehot_output_dtype_follows_array_values_and_float_indices():
    y = autograd.onehot(-1, T([0.0, 2.0]), 3, np.array([0, 7], np.int64))
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y.to_numpy(), [[7, 0, 0], [0, 0, 7]])
    assert (
        autograd.OneHot(-1, 3, np.array([0.0, 1.0]))(T([1], requires_grad=True))[0].creator.backward(
            np.ones((1, 3))
        )
        is None
    )


def test_onehot_out_of_range_index_is_all_off_values():
    y = autograd.onehot(-1, T([0, -4, 3, -3]), 3, [0, 1])
    np.testing.assert_array_equal(y.to_numpy(), [[1, 0, 0], [0, 0, 0], [0, 0, 0], [1, 0, 0]])


def test_onehot_errors():
    with pytest.raises(ValueError, match=r"^onehot: values must hold \[off_value, on_value\]"):
        autograd.onehot(-1, T([0]), 3, [0, 1, 2])
    with pytest.raises(ValueError, match=r"^onehot: indices must be whole numbers"):
        autograd.onehot(-1, T([0.5]), 3, [0, 1])
    with pytest.raises(ValueError, match=r"^onehot: needs depth >= 1 and axis in \[-2, 1\]"):
        autograd.onehot(2, T([0]), 3, [0, 1])


# ----- nonzero -----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 2)])
def test_nonzero_matches_numpy(shape):
    x = np.random.default_rng(0).integers(-1, 2, shape).astype(np.float32)
    y = autograd.nonzero(T(x))
    assert y.dtype == np.int64 and y.shape == (len(shape), np.count_nonzero(x))
    np.testing.assert_array_equal(y.to_numpy(), np.array(np.nonzero(x)))
    assert autograd.NonZero()(T(x, requires_grad=True))[0].creator.backward(None) is None


def test_nonzero_of_all_zeros_is_empty():
    assert autograd.nonzero(T(np.zeros((2, 3)))).shape == (2, 0)


# ----- scatter_elements --------------------------------------------------------------------------
def test_scatter_elements_onnx_examples():
    data = np.zeros((3, 3), np.float32)
    y = autograd.scatter_elements(T(data), [[1, 0, 2], [0, 2, 1]], [[1.0, 1.1, 1.2], [2.0, 2.1, 2.2]], 0)
    np.testing.assert_allclose(y.to_numpy(), [[2.0, 1.1, 0.0], [1.0, 0.0, 2.2], [0.0, 2.1, 1.2]])
    y = autograd.scatter_elements(T([[1.0, 2, 3, 4, 5]]), T([[1, -2]]), [[1.1, 2.1]], axis=1)
    np.testing.assert_allclose(y.to_numpy(), [[1.0, 1.1, 3.0, 2.1, 5.0]], rtol=1e-6)


def test_scatter_elements_add_accumulates_repeats():
    y = autograd.scatter_elements(T([[1.0, 2, 3, 4, 5]]), [[1, 1]], [[1.1, 2.1]], 1, reduction="add")
    np.testing.assert_allclose(y.to_numpy(), [[1.0, 5.2, 3.0, 4.0, 5.0]])


@pytest.mark.parametrize(("axis", "reduction"), [(0, "none"), (1, "none"), (-1, "add"), (0, "add")])
def test_scatter_elements_gradcheck(axis, reduction):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 5))
    n = x.shape[axis]
    # distinct positions along the axis for each column/row of the indices
    ind = np.stack([rng.permutation(n)[:3] for _ in range(3)], axis=1 - axis % 2).astype(np.int64)
    upd = rng.standard_normal(ind.shape)
    gradcheck(
        lambda a, i, u: autograd.scatter_elements(a, i, u, axis, reduction),
        [x, ind, upd],
        wrt=[0, 2],
    )


def test_scatter_elements_singa_class_form():
    x = T(np.zeros((3, 3), np.float32), requires_grad=True)
    y = autograd.ScatterElements([[1, 0, 2], [0, 2, 1]], [[1.0, 1.1, 1.2], [2.0, 2.1, 2.2]], 0)(x)[0]
    dx, _, _ = y.creator.backward(np.ones((3, 3), np.float32))
    np.testing.assert_array_equal(dx, [[0, 0, 1], [0, 1, 0], [1, 0, 0]])  # the unwritten cells


@pytest.mark.parametrize(
    ("reduction", "ufunc"), [("mul", np.multiply), ("max", np.maximum), ("min", np.minimum)]
)
def test_scatter_elements_other_reductions_combine_every_update(reduction, ufunc):
    x = np.array([[1.0, 2, 3, 4, 5]])
    y = autograd.scatter_elements(T(x, requires_grad=True), [[1, 1, 3]], [[1.5, -2.0, 0.5]], 1, reduction)
    want = x.copy()
    for i, u in zip([1, 1, 3], [1.5, -2.0, 0.5]):
        want[0, i] = ufunc(want[0, i], u)
    np.testing.assert_array_equal(y.to_numpy(), want)
    with pytest.raises(NotImplementedError, match=rf"no gradient for reduction '{reduction}'"):
        y.creator.backward(np.ones((1, 5)))


def test_scatter_elements_errors():
    x = T(np.zeros((3, 3)))
    with pytest.raises(ValueError, match=r"^scatter_elements: indices in \[0, 3\] are out of range"):
        autograd.scatter_elements(x, [[0, 3]], [[1.0, 2.0]], 0)
    with pytest.raises(ValueError, match=r"^scatter_elements: needs integer indices and updates"):
        autograd.scatter_elements(x, [[0, 1]], [[1.0]], 0)
    with pytest.raises(ValueError, match=r"^scatter_elements: axis 2 is out of range"):
        autograd.scatter_elements(x, [[0]], [[1.0]], 2)
    with pytest.raises(ValueError, match=r"^scatter_elements: reduction must be"):
        autograd.scatter_elements(x, [[0]], [[1.0]], 0, "sum")


def test_onehot_depth_as_a_one_element_array_or_tensor():
    want = np.eye(10, dtype=np.float32)[[1, 9]] * 2 + 1
    for depth in (np.array([10], np.float32), T(np.array([10], np.int64)), 10):
        y = autograd.onehot(-1, T([1.0, 9.0], np.float32), depth, np.array([1, 3], np.float32))
        np.testing.assert_array_equal(y.to_numpy(), want)
    with pytest.raises(ValueError, match=r"^onehot: depth must be one number"):
        autograd.onehot(-1, T([1]), [2, 3], [0, 1])
