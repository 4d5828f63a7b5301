"""SINGA's module-level tensor functions and extra Tensor methods, checked against numpy."""

import numpy as np
import pytest

from singa import autograd, tensor
from singa.tensor import Tensor

RNG = np.random.default_rng(7)


def _t(a):
    return tensor.from_numpy(np.asarray(a))


@pytest.mark.parametrize(
    "name, ref",
    [
        ("abs", np.abs),
        ("exp", np.exp),
        ("ceil", np.ceil),
        ("sign", np.sign),
        ("square", np.square),
        ("tanh", np.tanh),
        ("sigmoid", lambda a: 1 / (1 + np.exp(-a))),
    ],
)
def test_unary_functions_match_numpy(name, ref):
    a = RNG.normal(size=(3, 4)).astype(np.float32)
    out = getattr(tensor, name)(_t(a))
    np.testing.assert_allclose(out.to_numpy(), ref(a), rtol=1e-6)
    assert out.creator is None  # not recorded, as in SINGA


def test_log_and_sqrt_of_positive_values():
    a = RNG.uniform(0.5, 3, size=(2, 5)).astype(np.float32)
    np.testing.assert_allclose(tensor.log(_t(a)).to_numpy(), np.log(a), rtol=1e-6)
    np.testing.assert_allclose(tensor.sqrt(_t(a)).to_numpy(), np.sqrt(a), rtol=1e-6)


def test_comparisons_give_ones_and_zeros_in_the_input_dtype():
    a = np.array([[1.0, 2.0, 3.0]], np.float32)
    for name, ref in [("lt", np.less), ("le", np.less_equal), ("gt", np.greater)]:
        out = getattr(tensor, name)(_t(a), 2.0)
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out.to_numpy(), ref(a, 2.0).astype(np.float32))
    np.testing.assert_array_equal(tensor.ge(_t(a), _t(a[:, ::-1])).to_numpy(), [[0, 1, 1]])
    np.testing.assert_array_equal(tensor.eq(_t(a), 2.0).to_numpy(), [[0, 1, 0]])


def test_reductions_sum_average_and_rows_columns():
    a = RNG.normal(size=(2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(tensor.sum(_t(a)).to_numpy(), a.sum(), rtol=1e-5)
    np.testing.assert_allclose(tensor.sum(_t(a), axis=1).to_numpy(), a.sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(tensor.sum(_t(a), axis=(0, 2)).to_numpy(), a.sum(axis=(0, 2)), rtol=1e-5)
    out = tensor.zeros((2, 4))
    assert tensor.sum(_t(a), axis=1, out=out) is out
    with pytest.raises(ValueError, match="out has shape"):
        tensor.sum(_t(a), axis=0, out=tensor.zeros((2,)))
    assert isinstance(tensor.average(_t(a)), float)
    assert tensor.average(_t(a)) == pytest.approx(float(a.mean()), rel=1e-5)
    np.testing.assert_allclose(tensor.average(_t(a), axis=2).to_numpy(), a.mean(axis=2), rtol=1e-5)
    m = a[0]
    np.testing.assert_allclose(tensor.sum_columns(_t(m)).to_numpy(), m.sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(tensor.sum_rows(_t(m)).to_numpy(), m.sum(0, keepdims=True), rtol=1e-5)
    with pytest.raises(ValueError, match="2-d"):
        tensor.sum_rows(_t(a))


def test_tensordot_einsum_mult_match_numpy():
    a = RNG.normal(size=(2, 3, 2))
    np.testing.assert_allclose(tensor.tensordot(_t(a), _t(a), axes=1).to_numpy(), np.tensordot(a, a, 1))
    np.testing.assert_allclose(
        tensor.tensordot(_t(a), _t(a), axes=([0, 1], [2, 1])).to_numpy(),
        np.tensordot(a, a, ([0, 1], [2, 1])),
    )
    np.testing.assert_allclose(
        tensor.einsum("kij,kih->kjh", _t(a), _t(a)).to_numpy(), np.einsum("kij,kih->kjh", a, a)
    )
    with pytest.raises(ValueError, match="no operands"):
        tensor.einsum("ij->ji")
    x, w = RNG.normal(size=(3, 4)), RNG.normal(size=(4, 2))
    np.testing.assert_allclose(tensor.mult(_t(x), _t(w)).to_numpy(), x @ w)
    c = _t(np.ones((3, 2)))
    assert tensor.mult(_t(x), _t(w), c, alpha=2.0, beta=3.0) is c
    np.testing.assert_allclose(c.to_numpy(), 2 * x @ w + 3)


def test_repeat_concatenate_reshape_transpose():
    a = np.arange(12.0).reshape(2, 3, 2)
    np.testing.assert_array_equal(tensor.repeat(_t(a), 2).to_numpy(), np.repeat(a, 2))
    np.testing.assert_array_equal(tensor.repeat(_t(a), 4, axis=1).to_numpy(), np.repeat(a, 4, axis=1))
    np.testing.assert_array_equal(_t(a).repeat([1, 2, 0], axis=1).to_numpy(), np.repeat(a, [1, 2, 0], 1))
    with pytest.raises(ValueError, match="negative"):
        tensor.repeat(_t(a), -1)
    with pytest.raises(ValueError, match="must be an int"):
        tensor.repeat(_t(a), [1, 2])
    b = np.ones((2, 3, 1))
    np.testing.assert_array_equal(tensor.concatenate((_t(a), _t(b)), 2).to_numpy(), np.concatenate((a, b), 2))
    np.testing.assert_array_equal(tensor.reshape(_t(a), [3, 4]).to_numpy(), a.reshape(3, 4))
    np.testing.assert_array_equal(tensor.transpose(_t(a)).to_numpy(), a.T)
    np.testing.assert_array_equal(tensor.transpose(_t(a), [0, 2, 1]).to_numpy(), a.transpose(0, 2, 1))
    with pytest.raises(ValueError, match="axes"):
        tensor.transpose(_t(a), [1, 0])


def test_softmax_rows_sum_to_one():
    a = RNG.normal(size=(4, 5)).astype(np.float32)
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(tensor.softmax(_t(a)).to_numpy(), e / e.sum(1, keepdims=True), rtol=1e-5)
    v = RNG.normal(size=(6,))
    np.testing.assert_allclose(tensor.softmax(_t(v)).to_numpy().sum(), 1.0)


def test_binary_functions_with_and_without_result_tensor():
    a, b = RNG.normal(size=(2, 3)), RNG.normal(size=(2, 3)) + 3
    for name, ref in [
        ("add", np.add),
        ("sub", np.subtract),
        ("eltwise_mult", np.multiply),
        ("div", np.divide),
    ]:
        fn = getattr(tensor, name)
        np.testing.assert_allclose(fn(_t(a), _t(b)).to_numpy(), ref(a, b))
        ret = tensor.zeros((2, 3), dtype=np.float64)
        assert fn(_t(a), 2.0, ret) is ret
        np.testing.assert_allclose(ret.to_numpy(), ref(a, 2.0))
    ints = tensor.from_numpy(np.array([1, 2], np.int32))
    assert tensor.add(ints, 0.5).dtype == np.float32
    np.testing.assert_allclose(tensor.pow(_t(b), 2.0).to_numpy(), b**2)
    y = _t(np.ones(3))
    assert tensor.axpy(2.0, _t(np.arange(3.0)), y) is y
    np.testing.assert_array_equal(y.to_numpy(), [1, 3, 5])


def test_add_row_and_column_with_scales():
    m = np.ones((2, 3))
    out = tensor.add_column(2.0, _t([1.0, 2.0]), 3.0, _t(m))
    np.testing.assert_array_equal(out.to_numpy(), 2 * np.array([[1.0], [2.0]]) + 3 * m)
    out = tensor.add_row(1.0, _t([1.0, 2.0, 3.0]), 0.5, _t(m))
    np.testing.assert_array_equal(out.to_numpy(), np.array([[1.5, 2.5, 3.5]] * 2))


def test_copy_data_to_from_copies_a_flat_range_and_checks_bounds():
    dst, src = _t(np.zeros((2, 3))), _t(np.arange(6.0).reshape(2, 3))
    tensor.copy_data_to_from(dst, src, 2, dst_offset=3, src_offset=1)
    np.testing.assert_array_equal(dst.to_numpy(), [[0, 0, 0], [1, 2, 0]])
    with pytest.raises(ValueError, match="do not fit"):
        tensor.copy_data_to_from(dst, src, 4, dst_offset=3)
    np.testing.assert_array_equal(dst.to_numpy(), [[0, 0, 0], [1, 2, 0]])  # unchanged


def test_sizes_raw_wrapping_and_host_copies():
    assert tensor.product((2, 3, 4)) == 24 and tensor.product(()) == 1
    assert tensor.sizeof(tensor.float32) == 4 and tensor.sizeof(np.float64) == 8
    arr = np.arange(4.0)
    t = tensor.from_raw_tensor(arr)
    assert t.data is arr
    assert [x.data for x in tensor.from_raw_tensors([arr, arr])] == [arr, arr]
    with pytest.raises(TypeError, match="numpy or cupy"):
        tensor.from_raw_tensor([1, 2])
    h = tensor.to_host(t)
    assert h.data is not arr and np.array_equal(h.to_numpy(), arr)
    c = tensor.contiguous(_t(np.ones((3, 2))).transpose())
    assert c.data.flags.c_contiguous and c.shape == (2, 3)


def test_random_fills_return_the_tensor():
    t = tensor.zeros((1000,))
    assert tensor.gaussian(1.0, 0.01, t) is t and abs(tensor.average(t) - 1) < 0.01
    assert tensor.uniform(2.0, 3.0, t) is t and 2 <= t.to_numpy().min()
    assert tensor.bernoulli(1.0, t) is t and t.to_numpy().min() == 1


def test_copy_is_shallow_and_deepcopy_is_not():
    t = Tensor((2, 3))
    t += 1.5
    shallow, deep = t.copy(), t.deepcopy()
    t += 1.0
    assert shallow.to_numpy()[0, 0] == 2.5 and deep.to_numpy()[0, 0] == 1.5


def test_in_place_operators_update_data_tensors_in_place():
    t = tensor.from_numpy(np.full((2,), 4.0, np.float32))
    buf = t.data
    t -= 1
    t *= 2
    t /= 3
    t += tensor.from_numpy(np.array([1.0, 2.0], np.float32))
    assert t.data is buf
    np.testing.assert_allclose(t.to_numpy(), [3.0, 4.0])
    i = tensor.from_numpy(np.array([1, 2], np.int32))
    i += 1.7  # cast back to the tensor's dtype, as SINGA's buffer keeps its type
    assert i.dtype == np.int32 and list(i.to_numpy()) == [2, 3]


def test_in_place_operator_on_an_autograd_result_is_recorded(monkeypatch):
    monkeypatch.setattr(autograd, "training", True)
    x = Tensor(data=np.array([1.0, 2.0]), dtype=np.float64, requires_grad=True, stores_grad=True)
    y = autograd.mul(x, x)
    y += x  # an operation's output: differentiable, out of place
    assert y.creator is not None
    grads = dict(autograd.backward(autograd.sum(y)))
    np.testing.assert_allclose(grads[x].to_numpy(), 2 * np.array([1.0, 2.0]) + 1)


def test_item_memsize_is_transpose_norms():
    assert tensor.from_numpy(np.array([[2.5]])).item() == 2.5
    with pytest.raises(ValueError, match="2 elements"):
        tensor.from_numpy(np.array([1.0, 2.0])).item()
    t = tensor.zeros((2, 3))
    assert t.memsize() == 24 and not t.is_transpose()
    assert t.transpose().is_transpose()
    v = tensor.from_numpy(np.array([3.0, -4.0]))
    assert v.l1() == pytest.approx(3.5) and v.l2() == pytest.approx(2.5)


def test_as_type_accepts_singa_names_and_to_type_converts_in_place():
    t = tensor.from_numpy(np.array([1.7, -2.2], np.float32))
    assert t.as_type("int").dtype == np.int32
    np.testing.assert_array_equal(t.as_type("int").to_numpy(), [1, -2])
    assert t.as_type("float").dtype == np.float32
    with pytest.raises(TypeError, match="not a data type"):
        t.as_type("complex-ish")
    assert t.to_type(np.float64) is t and t.dtype == np.float64


def test_reset_like_floordiv_and_row_column_methods():
    t = tensor.zeros((1,))
    t.reset_like(tensor.zeros((2, 2), dtype=np.int32))
    assert t.shape == (2, 2) and t.dtype == np.int32
    np.testing.assert_array_equal((tensor.from_numpy(np.array([7.0, -7.0])) // 2).to_numpy(), [3, -4])
    m = tensor.from_numpy(np.ones((2, 3)))
    m.add_row(tensor.from_numpy(np.array([1.0, 2.0, 3.0])))
    m.mult_column(tensor.from_numpy(np.array([1.0, 2.0])))
    m.div_row(tensor.from_numpy(np.array([2.0, 3.0, 4.0])))
    np.testing.assert_allclose(m.to_numpy(), [[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]])
    with pytest.raises(ValueError, match="2-d"):
        tensor.zeros((3,)).add_column(tensor.zeros((3,)))


def test_T_is_a_method_giving_the_differentiable_transpose(monkeypatch):
    monkeypatch.setattr(autograd, "training", True)
    a = np.arange(6.0).reshape(2, 3)
    x = Tensor(data=a, dtype=np.float64, requires_grad=True, stores_grad=True)
    y = x.T()
    np.testing.assert_array_equal(y.to_numpy(), a.T)
    grads = dict(autograd.backward(autograd.sum(autograd.mul(y, y))))
    np.testing.assert_allclose(grads[x].to_numpy(), 2 * a)
