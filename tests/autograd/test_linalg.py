"""Linear algebra operators: matmul, add_bias, gemm."""

import numpy as np
import pytest
from gpu_compare import assert_gpu_matches_cpu  # noqa: I001

from singa import autograd
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor

rng = np.random.default_rng(0)


def const(a, dtype=np.float64):
    return Tensor(data=np.asarray(a), dtype=dtype, requires_grad=False)


def param(a, dtype=np.float64):
    return Tensor(data=np.asarray(a), dtype=dtype, requires_grad=True, stores_grad=True)


def randn(*shape):
    return rng.standard_normal(shape)


MATMUL_SHAPES = [
    ((3, 4), (4, 5)),
    ((2, 3, 4), (2, 4, 2)),
    ((2, 3, 4), (4, 2)),  # a stack times one matrix
    ((3, 4), (2, 4, 2)),  # one matrix times a stack
    ((2, 1, 3, 4), (5, 4, 2)),  # both batch dims broadcast
    ((1, 3, 4), (2, 4, 1)),
    ((4,), (4, 3)),  # 1-D operands, as numpy
    ((2, 3, 4), (4,)),
    ((4,), (2, 4, 3)),
    ((4,), (4,)),
]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES)
def test_matmul_forward_and_gradcheck(sa, sb):
    a, b = randn(*sa), randn(*sb)
    y = autograd.matmul(const(a), const(b))
    np.testing.assert_allclose(y.to_numpy(), np.matmul(a, b), rtol=1e-12)
    assert y.shape == np.matmul(a, b).shape
    gradcheck(autograd.matmul, [a, b])


def test_matmul_float32_stays_float32_and_operator():
    a, b = randn(3, 4).astype(np.float32), randn(4, 2).astype(np.float32)
    y = const(a, np.float32) @ const(b, np.float32)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.to_numpy(), a @ b, rtol=1e-5)


def test_matmul_only_needed_gradients():
    w = param(randn(4, 2))
    x = Tensor(data=randn(3, 4), dtype=np.float64, requires_grad=True)  # not stored
    y = autograd.matmul(x, w)
    assert y.creator.needs_grad == (True, True)
    grads = autograd.gradients(y, dy=np.ones((3, 2)))
    assert set(grads) == {id(w)}
    y2 = autograd.matmul(const(randn(3, 4)), w)
    assert y2.creator.backward(np.ones((3, 2)))[0] is None


@pytest.mark.parametrize("sa,sb", [((3, 4), (5, 2)), ((2, 3, 4), (3, 4, 2)), ((4,), (3,)), ((), (3,))])
def test_matmul_shape_errors(sa, sb):
    with pytest.raises(ValueError, match=r"matmul.*" + str(sa).replace("(", r"\(").replace(")", r"\)")):
        autograd.matmul(const(np.ones(sa)), const(np.ones(sb)))


@pytest.mark.parametrize("axis,bshape", [(0, (5,)), (0, (1, 5)), (1, (3,)), (1, (3, 1))])
def test_add_bias_forward_gradcheck_and_shape(axis, bshape):
    x, b = randn(3, 5), randn(*bshape)
    xc = x.copy()
    y = autograd.add_bias(const(x), const(b), axis)
    expect = x + (b.reshape(1, -1) if axis == 0 else b.reshape(-1, 1))
    np.testing.assert_allclose(y.to_numpy(), expect)
    np.testing.assert_array_equal(x, xc)
    gradcheck(lambda x, b: autograd.add_bias(x, b, axis), [x, b])
    bt = param(b)
    g = autograd.gradients(autograd.add_bias(param(x), bt, axis), dy=np.ones((3, 5)))
    assert g[bt].shape == bshape


def test_add_bias_never_modifies_x_and_float32():
    x = const(np.ones((4, 3), np.float32), np.float32)
    before = x.data.copy()
    y = autograd.add_bias(x, const(np.arange(3), np.float32))
    np.testing.assert_array_equal(x.data, before)
    assert y.data is not x.data and y.dtype == np.float32


@pytest.mark.parametrize(
    "xshape,bshape,axis",
    [((3, 5), (3,), 0), ((3, 5), (5, 1), 0), ((3, 5), (1, 3), 1), ((3, 5, 2), (2,), 0), ((3, 5), (5,), 2)],
)
def test_add_bias_shape_errors(xshape, bshape, axis):
    with pytest.raises(ValueError, match="add_bias"):
        autograd.add_bias(const(np.ones(xshape)), const(np.ones(bshape)), axis)


def _gemm_ref(a, b, c, alpha, beta, ta, tb):
    y = alpha * ((a.T if ta else a) @ (b.T if tb else b))
    return y if c is None else y + beta * c


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("cshape", [None, (3, 5), (5,), (1, 5), (3, 1), ()])
def test_gemm_forward_and_gradcheck(ta, tb, cshape):
    a = randn(4, 3) if ta else randn(3, 4)
    b = randn(5, 4) if tb else randn(4, 5)
    alpha, beta = 0.7, -1.3
    if cshape is None:
        y = autograd.gemm(const(a), const(b), None, alpha, beta, ta, tb)
        np.testing.assert_allclose(y.to_numpy(), _gemm_ref(a, b, None, alpha, beta, ta, tb))
        gradcheck(lambda a, b: autograd.gemm(a, b, None, alpha, beta, ta, tb), [a, b])
        return
    c = randn(*cshape)
    y = autograd.gemm(const(a), const(b), const(c), alpha, beta, ta, tb)
    np.testing.assert_allclose(y.to_numpy(), _gemm_ref(a, b, c, alpha, beta, ta, tb), rtol=1e-12)
    gradcheck(lambda a, b, c: autograd.gemm(a, b, c, alpha, beta, ta, tb), [a, b, c])


def test_gemm_defaults_and_beta_zero():
    a, b, c = randn(2, 3), randn(3, 4), randn(4)
    np.testing.assert_allclose(autograd.gemm(const(a), const(b), const(c)).to_numpy(), a @ b + c)
    np.testing.assert_allclose(autograd.gemm(const(a), const(b), const(c), beta=0.0).to_numpy(), a @ b)
    gradcheck(lambda a, b, c: autograd.gemm(a, b, c, beta=0.0), [a, b, c])


@pytest.mark.parametrize(
    "sa,sb,sc,ta,tb",
    [
        ((3, 4), (5, 4), None, False, False),
        ((3, 4), (4, 5), None, True, False),
        ((3, 4), (4, 5), (3, 4), False, False),
        ((3, 4), (4, 5), (2, 3, 5), False, False),
        ((3, 4, 1), (4, 5), None, False, False),
    ],
)
def test_gemm_shape_errors(sa, sb, sc, ta, tb):
    c = None if sc is None else const(np.ones(sc))
    with pytest.raises(ValueError, match="gemm"):
        autograd.gemm(const(np.ones(sa)), const(np.ones(sb)), c, transA=ta, transB=tb)


# ----- GPU (cupy) path: the same operators compared with the CPU (skipped without a GPU) -----
@pytest.mark.gpu
@pytest.mark.parametrize(
    "fn,shapes",
    [
        (autograd.matmul, [(2, 1, 3, 4), (5, 4, 2)]),
        (autograd.matmul, [(6, 3, 4), (4, 2)]),
        (lambda x, b: autograd.add_bias(x, b, 0), [(64, 5), (5,)]),
        (lambda x, b: autograd.add_bias(x, b, 1), [(6, 5), (6, 1)]),
        (lambda a, b, c: autograd.gemm(a, b, c, 0.5, 2.0, True, True), [(4, 3), (5, 4), (5,)]),
    ],
)
def test_gpu_matches_cpu(fn, shapes):
    assert_gpu_matches_cpu(fn, [randn(*s).astype(np.float32) for s in shapes])


# ----- cossim --------------------------------------------------------------------------------------
def test_cossim_values_and_gradients():
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    y = autograd.cossim(Tensor(data=a, dtype=a.dtype), Tensor(data=b, dtype=b.dtype))
    want = [np.dot(p, q) / np.linalg.norm(p) / np.linalg.norm(q) for p, q in zip(a, b)]
    np.testing.assert_allclose(y.to_numpy(), want, rtol=1e-13)
    gradcheck(autograd.cossim, [a, b])
    gradcheck(lambda p, q: autograd.CosSim()(p, q)[0], [a, b])


def test_cossim_needs_two_matrices_of_one_shape():
    t = Tensor(data=np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"^cossim: needs two \(N, D\) matrices of one shape"):
        autograd.cossim(t, Tensor(data=np.ones((3, 3))))
    with pytest.raises(ValueError, match=r"^cossim: needs floating-point inputs"):
        autograd.cossim(
            Tensor(data=np.ones((2, 3), np.int64), dtype=np.int64),
            Tensor(data=np.ones((2, 3), np.int64), dtype=np.int64),
        )


# ----- det -------------------------------------------------------------------------------------
def test_det_forward_and_gradient():
    x = np.random.default_rng(1).standard_normal((2, 3, 3, 3))
    np.testing.assert_allclose(
        autograd.det(Tensor(data=x, dtype=x.dtype)).to_numpy(), np.linalg.det(x), rtol=1e-12
    )
    gradcheck(autograd.det, [x])
    with pytest.raises(ValueError, match="det: needs floating square"):
        autograd.det(Tensor(data=np.zeros((2, 3))))
