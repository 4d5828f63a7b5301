"""Reductions: reduce_sum, reduce_mean, reduce_max (ONNX) and sum, mean (PyTorch-like)."""

import numpy as np
import pytest
from gpu_compare import assert_gpu_matches_cpu  # noqa: I001

from singa import autograd
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor

rng = np.random.default_rng(0)


def const(a, dtype=np.float64):
    return Tensor(data=np.asarray(a), dtype=dtype, requires_grad=False)


def np_axes(axes):
    return None if axes is None or axes == [] else tuple(axes)


AXES = [None, [], [0], [1, 2], [-1], [0, -1], [0, 1, 2]]
ONNX = [
    (autograd.reduce_sum, np.sum),
    (autograd.reduce_mean, np.mean),
    (autograd.reduce_max, np.max),
]


@pytest.mark.parametrize("fn,ref", ONNX)
@pytest.mark.parametrize("axes", AXES)
@pytest.mark.parametrize("keepdims", [1, 0])
def test_onnx_reductions(fn, ref, axes, keepdims):
    x = rng.standard_normal((2, 3, 4))  # distinct values: max has no ties
    y = fn(const(x), axes, keepdims)
    expect = ref(x, axis=np_axes(axes), keepdims=bool(keepdims))
    assert y.shape == np.shape(expect)
    assert isinstance(y.data, np.ndarray)
    np.testing.assert_allclose(y.to_numpy(), expect, rtol=1e-12)
    gradcheck(lambda x: fn(x, axes, keepdims), [x])


def test_onnx_default_keeps_dims_and_reduces_all():
    x = rng.standard_normal((2, 3))
    assert autograd.reduce_sum(const(x)).shape == (1, 1)
    np.testing.assert_allclose(autograd.reduce_mean(const(x)).to_numpy(), [[x.mean()]])
    assert autograd.reduce_max(const(x), 1).shape == (2, 1)


@pytest.mark.parametrize("fn,ref", [(autograd.sum, np.sum), (autograd.mean, np.mean)])
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2), (1,)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_torch_like(fn, ref, axis, keepdims):
    x = rng.standard_normal((3, 2, 4))
    y = fn(const(x), axis, keepdims)
    expect = ref(x, axis=axis, keepdims=keepdims)
    assert y.shape == np.shape(expect)
    np.testing.assert_allclose(y.to_numpy(), expect, rtol=1e-12)
    gradcheck(lambda x: fn(x, axis, keepdims), [x])


def test_sum_default_is_a_scalar_and_float32():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = autograd.sum(const(x, np.float32))
    assert y.shape == () and y.dtype == np.float32 and float(y) == 15.0
    assert autograd.mean(const(x, np.float32), 0).dtype == np.float32


def test_reduce_max_ties_split_equally():
    x = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    xt = Tensor(data=x, dtype=np.float64, requires_grad=True, stores_grad=True)
    g = autograd.gradients(autograd.reduce_max(xt, [1]), dy=np.array([[6.0], [4.0]]))[xt].to_numpy()
    np.testing.assert_allclose(g, [[0, 3, 3, 0], [1, 1, 1, 1]])
    # with exactly two-way ties, central differences also see the half split
    pairs = np.array([[0.5, 2.0, -1.0, 2.0], [3.0, 1.0, 3.0, -2.0]])
    gradcheck(lambda x: autograd.reduce_max(x, [1], 0), [pairs])
    gradcheck(lambda x: autograd.reduce_max(x, None, 0), [np.array([1.0, 4.0, 4.0, 2.0])])


def test_gradient_is_writable_and_float32():
    x = Tensor(data=np.ones((3, 4), np.float32), requires_grad=True, stores_grad=True)
    for fn in (autograd.reduce_sum, autograd.reduce_mean, autograd.reduce_max):
        g = autograd.gradients(fn(x, [0]), dy=np.ones((1, 4), np.float32))[x]
        assert g.dtype == np.float32 and g.shape == (3, 4)
        g.data += 1  # a fresh array, not a read-only broadcast view


@pytest.mark.parametrize("fn", [autograd.reduce_sum, autograd.reduce_mean, autograd.reduce_max])
def test_bad_axes(fn):
    x = const(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"reduce_.*\(2, 3\)"):
        fn(x, [2])
    with pytest.raises(ValueError, match="repeated"):
        fn(x, [1, -1])
    with pytest.raises(ValueError, match="sum"):
        autograd.sum(x, -3)


def test_a_tensor_as_axes_of_reduce_mean_is_refused():
    a, b = const(np.ones((2, 3))), const(np.ones((2, 3)))
    with pytest.raises(TypeError, match="reduce_mean: axes must be an int, a sequence of ints or None"):
        autograd.reduce_mean(a, b)


def test_sum_and_mean_of_several_tensors_are_elementwise_as_in_singa():
    """SINGA's sum(a, b, ...) / mean(a, b, ...): elementwise over several tensors
    (these replace the old TypeError for a Tensor given as the axis)."""
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((2, 3)), rng.standard_normal((2, 3)), rng.standard_normal((3,))]
    ts = [const(x) for x in xs]
    np.testing.assert_allclose(autograd.sum(*ts).to_numpy(), xs[0] + xs[1] + xs[2])
    np.testing.assert_allclose(autograd.mean(*ts).to_numpy(), (xs[0] + xs[1] + xs[2]) / 3)
    np.testing.assert_allclose(autograd.sum(ts[0], ts[1]).to_numpy(), xs[0] + xs[1])
    gradcheck(lambda a, b, c: autograd.sum(a, b, c), xs)
    gradcheck(lambda a, b, c: autograd.mean(a, b, c), xs)
    with pytest.raises(ValueError, match="elementwise"):
        autograd.sum(ts[0], ts[1], axis=0)
    with pytest.raises(ValueError, match="one dtype"):
        autograd.sum(ts[0], const(np.ones((2, 3)), np.float32))
    with pytest.raises(TypeError, match="first argument must be a Tensor"):
        autograd.sum(1.0, ts[0])


def test_sum_and_mean_keep_their_one_tensor_forms():
    x = np.arange(6.0).reshape(2, 3)
    t = const(x)
    np.testing.assert_allclose(autograd.sum(t, 1).to_numpy(), x.sum(1))
    np.testing.assert_allclose(autograd.sum(t, 1, True).to_numpy(), x.sum(1, keepdims=True))
    np.testing.assert_allclose(autograd.mean(t, axis=0, keepdims=True).to_numpy(), x.mean(0, keepdims=True))
    with pytest.raises(TypeError, match="axis"):
        autograd.sum(t, 1, axis=0)


def test_reduce_max_empty_error():
    with pytest.raises(ValueError, match="reduce_max"):
        autograd.reduce_max(const(np.ones((0, 3))))


def test_integer_input_is_exact():
    x = np.arange(24, dtype=np.int64).reshape(2, 3, 4) * (2**40)
    t = Tensor(data=x, dtype=np.int64, requires_grad=False)
    np.testing.assert_array_equal(autograd.sum(t, 0).to_numpy(), x.sum(0))
    np.testing.assert_array_equal(autograd.reduce_sum(t, [2]).to_numpy(), x.sum(2, keepdims=True))
    np.testing.assert_array_equal(autograd.mean(t, (1, 2)).to_numpy(), x.mean((1, 2)))
    np.testing.assert_array_equal(autograd.reduce_max(t, [0]).to_numpy(), x.max(0, keepdims=True))


# ----- GPU (cupy) path: the same operators compared with the CPU (skipped without a GPU) -----
@pytest.mark.gpu
@pytest.mark.parametrize(
    "fn",
    [
        lambda x: autograd.reduce_sum(x, [0, 1]),
        lambda x: autograd.reduce_mean(x, [-1], 0),
        lambda x: autograd.reduce_max(x, [1]),
        lambda x: autograd.sum(x),
        lambda x: autograd.mean(x, (0, 2), True),
    ],
)
def test_gpu_matches_cpu(fn):
    assert_gpu_matches_cpu(fn, [rng.standard_normal((4, 5, 6)).astype(np.float32)])


def _cumsum_reference(x, axis, exclusive, reverse):
    a = np.flip(x, axis) if reverse else x
    y = np.cumsum(a, axis=axis)
    if exclusive:
        y = y - a
    return np.flip(y, axis) if reverse else y


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum(axis, exclusive, reverse):
    x = rng.standard_normal((3, 4, 2))
    y = autograd.cumsum(const(x), axis, exclusive, reverse)
    np.testing.assert_allclose(y.to_numpy(), _cumsum_reference(x, axis, exclusive, reverse), rtol=1e-12)
    gradcheck(lambda t: autograd.cumsum(t, axis, exclusive, reverse), [x])


def test_cumsum_keeps_integer_dtype_and_checks_axis():
    x = const(np.arange(6).reshape(2, 3), np.int32)
    y = autograd.cumsum(x, 1)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y.to_numpy(), [[0, 1, 3], [3, 7, 12]])
    with pytest.raises(ValueError, match="axis 2"):
        autograd.cumsum(x, 2)
