"""Tensor: construction, casting, copies, fills, views and operators."""

import numpy as np
import pytest

from singa import autograd, device, tensor
from singa.tensor import Tensor


def test_construction_copies_and_casts():
    src = np.arange(6, dtype=np.float64).reshape(2, 3)
    t = Tensor(data=src)
    assert t.dtype == np.float32 and t.shape == (2, 3) and t.ndim() == 2 and t.size() == 6
    src[0, 0] = 99
    assert t.to_numpy()[0, 0] == 0  # copied
    assert Tensor(data=[1, 2], dtype=tensor.int32).dtype == np.int32
    assert Tensor(data=src, dtype=tensor.float64).dtype == np.float64
    z = Tensor(shape=(2, 2))
    assert (z.to_numpy() == 0).all() and z.requires_grad and not z.stores_grad and z.creator is None
    assert tensor.PlaceHolder is Tensor


def test_constructors_require_but_do_not_store_gradients_as_in_singa():
    made = [
        tensor.zeros((2, 3)),
        tensor.ones((2, 3)),
        tensor.random((2, 3)),
        tensor.zeros_like(Tensor((2,))),
        tensor.ones_like(Tensor((2,))),
    ]
    for t in made:
        assert t.requires_grad and not t.stores_grad and t.creator is None
    assert (made[1].to_numpy() == 1).all() and ((made[2].to_numpy() >= 0) & (made[2].to_numpy() < 1)).all()
    a, b = tensor.random((2, 3)), tensor.random((2, 3))
    a.stores_grad = b.stores_grad = True  # SINGA's way to treat them as parameters
    prev, autograd.training = autograd.training, True
    try:
        g = autograd.gradients(autograd.mse_loss(autograd.add(a, b), tensor.zeros((2, 3))))
    finally:
        autograd.training = prev
    np.testing.assert_allclose(g[a].to_numpy(), (a.to_numpy() + b.to_numpy()) / 3, rtol=1e-6)


def test_copy_from_numpy_casts_values_in_place_and_checks_size():
    t = Tensor((2, 2), dtype=tensor.int32)
    buf = t.data
    t.copy_from_numpy(np.array([[1.7, -2.2], [3.0, 4.9]]))
    assert t.data is buf
    np.testing.assert_array_equal(t.to_numpy(), [[1, -2], [3, 4]])  # converted, not reinterpreted
    t.copy_from_numpy(np.arange(4))  # same size, other shape: reshaped
    with pytest.raises(ValueError, match=r"\(5,\).*\(2, 2\)"):
        t.copy_from_numpy(np.zeros(5))


def test_copy_from_clone_as_type_and_copy_data():
    a = Tensor(data=[[1.0, 2.0]])
    b = Tensor((1, 2)).copy_from(a)
    np.testing.assert_array_equal(b.to_numpy(), [[1, 2]])
    c = Tensor((1, 2)).copy_data(a)
    np.testing.assert_array_equal(c.to_numpy(), [[1, 2]])
    d = a.clone()
    d.data[0, 0] = 5
    assert a.to_numpy()[0, 0] == 1
    assert a.as_type(tensor.int64).dtype == np.int64
    with pytest.raises(ValueError):
        Tensor((3,)).copy_from(a)


def test_fills_are_reproducible_with_a_device_seed():
    dev = device.get_default_device()
    dev.set_rand_seed(7)
    g1 = Tensor((2000,)).gaussian(2.0, 0.5).to_numpy()
    u1 = Tensor((2000,)).uniform(-1, 3).to_numpy()
    b1 = Tensor((2000,)).bernoulli(0.3).to_numpy()
    dev.set_rand_seed(7)
    np.testing.assert_array_equal(Tensor((2000,)).gaussian(2.0, 0.5).to_numpy(), g1)
    np.testing.assert_array_equal(Tensor((2000,)).uniform(-1, 3).to_numpy(), u1)
    assert abs(g1.mean() - 2) < 0.05 and abs(g1.std() - 0.5) < 0.05
    assert u1.min() >= -1 and u1.max() < 3 and abs(u1.mean() - 1) < 0.1
    assert set(np.unique(b1)) <= {0.0, 1.0} and abs(b1.mean() - 0.3) < 0.05
    t = Tensor((3,))
    assert t.set_value(4.0) is t and (t.to_numpy() == 4).all()


def test_rng_state_round_trip():
    dev = device.get_default_device()
    state = dev.get_rng_state()
    a = Tensor((5,)).gaussian(0, 1).to_numpy()
    dev.set_rng_state(state)
    np.testing.assert_array_equal(Tensor((5,)).gaussian(0, 1).to_numpy(), a)
    with pytest.raises(ValueError):
        dev.set_rng_state({"nonsense": 1})


def test_module_functions():
    arr = np.arange(4, dtype=np.int64)
    t = tensor.from_numpy(arr)
    assert t.dtype == np.int64 and t.requires_grad and not t.stores_grad  # as in SINGA
    np.testing.assert_array_equal(tensor.to_numpy(t), arr)
    assert (tensor.zeros((2,)).to_numpy() == 0).all() and (tensor.ones((2,)).to_numpy() == 1).all()
    assert tensor.zeros_like(t).dtype == np.int64 and (tensor.ones_like(t).to_numpy() == 1).all()
    r = tensor.random((100,)).to_numpy()
    assert r.min() >= 0 and r.max() < 1


def test_operators_record_autograd_ops_with_broadcasting():
    autograd.training = True
    try:
        a = Tensor(data=[[1.0, 2.0], [3.0, 4.0]], stores_grad=True)
        b = Tensor(data=[10.0, 20.0], stores_grad=True)
        y = ((a + b) * 2 - a / b) ** 2
        assert y.creator is not None
        ref = ((a.to_numpy() + b.to_numpy()) * 2 - a.to_numpy() / b.to_numpy()) ** 2
        np.testing.assert_allclose(y.to_numpy(), ref, rtol=1e-6)
        g = autograd.gradients(y, dy=np.ones((2, 2), np.float32))
        assert g[a].shape == (2, 2) and g[b].shape == (2,)
        np.testing.assert_allclose((-a).to_numpy(), -a.to_numpy())
        np.testing.assert_allclose((a @ a).to_numpy(), a.to_numpy() @ a.to_numpy())
        np.testing.assert_allclose((1 - a).to_numpy(), 1 - a.to_numpy())
        assert a.T().shape == (2, 2) and a.reshape(4).shape == (4,) and a.reshape((1, 4)).shape == (1, 4)
        np.testing.assert_array_equal(a[1].to_numpy(), [[3, 4]])  # SINGA: an int index keeps its axis
        np.testing.assert_array_equal(a.transpose((1, 0)).to_numpy(), a.to_numpy().T)
    finally:
        autograd.training = False


def test_comparisons_are_boolean_and_not_differentiated():
    a = Tensor(data=[1.0, 2.0, 3.0])
    assert (a > 2).dtype == np.bool_ and (a > 2).creator is None
    np.testing.assert_array_equal((a <= 2).to_numpy(), [True, True, False])
    np.testing.assert_array_equal((a == a).to_numpy(), [True, True, True])
    np.testing.assert_array_equal((a != 2).to_numpy(), [True, False, True])
    assert float(Tensor(data=[2.5])) == 2.5


def test_a_tensor_is_always_true_as_in_singa():
    """SINGA code tests ``if labels:`` for "a tensor was given", whatever it holds."""
    assert bool(Tensor(data=[1.0, 2.0])) and bool(Tensor(data=[0.0])) and bool(Tensor((0,)))
    labels = Tensor(data=np.zeros((4, 1)))
    assert (labels if labels else None) is labels


def test_to_device_and_host_on_cpu():
    t = Tensor(data=[1.0])
    assert t.to_host() is t and t.device is device.get_default_device()
    assert device.create_cpu_device() is device.get_default_device()


def test_gpu_request_without_gpu_says_what_is_missing():
    if device.get_num_gpus() > 0:
        pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError, match="cupy|GPU"):
        device.create_cuda_gpu()


def test_an_int_shape_means_a_vector():
    for t in (
        tensor.Tensor(shape=3),
        tensor.Tensor(np.int64(3)),
        tensor.zeros(3),
        tensor.ones(3),
        tensor.random(3),
    ):
        assert t.shape == (3,) and t.dtype == np.float32
    assert (tensor.ones(3).to_numpy() == 1).all()
    assert tensor.Tensor(shape=(2, 3)).shape == (2, 3) and tensor.Tensor().shape == ()


def test_int_tensor_with_a_python_float_gives_float32_as_in_singa():
    x = tensor.from_numpy(np.arange(3, dtype=np.int32))
    for y, ref in [
        (x + 0.5, [0.5, 1.5, 2.5]),
        (0.5 + x, [0.5, 1.5, 2.5]),
        (x * 1.5, [0.0, 1.5, 3.0]),
        (2.0 - x, [2.0, 1.0, 0.0]),
        (x / 2.0, [0.0, 0.5, 1.0]),
    ]:
        assert y.dtype == np.float32
        np.testing.assert_array_equal(y.to_numpy(), np.array(ref, np.float32))
    assert (x + 1).dtype == np.int32  # an int stays an int
    d = Tensor(data=[1.0, 2.0], dtype=np.float64)
    assert (d + 0.5).dtype == np.float64  # a float tensor keeps its dtype
