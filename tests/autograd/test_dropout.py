"""Dropout: mask statistics, scaling, fresh masks, reproducibility, eval identity."""

import numpy as np
import pytest

from singa import autograd, device
from singa.autograd.dropout import Dropout
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor

dev = device.get_default_device()


@pytest.fixture(autouse=True)
def training_and_rng():
    prev = autograd.training
    state = dev.get_rng_state()
    autograd.training = True
    yield
    autograd.training = prev
    dev.set_rng_state(state)


def const(a, dtype=np.float64):
    return Tensor(data=np.asarray(a), dtype=dtype, requires_grad=False)


@pytest.mark.parametrize("shape,ratio", [((4, 5), 0.5), ((2, 3, 4), 0.2), ((7,), 0.9)])
def test_gradcheck_with_a_repeated_mask(shape, ratio):
    x = np.random.default_rng(0).standard_normal(shape)

    def f(x):
        dev.set_rand_seed(11)  # the same mask on every call gradcheck makes
        return autograd.dropout(x, ratio, training=True)

    gradcheck(f, [x])
    y = f(const(x)).to_numpy()
    kept = y != 0
    assert 0 < kept.sum() < x.size
    np.testing.assert_allclose(y[kept], x[kept] / (1 - ratio), rtol=1e-14)


def test_gradient_is_the_scaled_mask():
    dev.set_rand_seed(3)
    x = Tensor(data=np.ones((50, 40)), dtype=np.float64, requires_grad=True, stores_grad=True)
    y = autograd.dropout(x, 0.25)
    dy = np.random.default_rng(1).standard_normal((50, 40))
    g = autograd.gradients(y, dy=dy)[x].to_numpy()
    np.testing.assert_allclose(g, dy * y.to_numpy(), rtol=1e-14)


@pytest.mark.parametrize("ratio", [0.1, 0.5, 0.8])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mask_statistics_and_scaling(ratio, dtype):
    dev.set_rand_seed(5)
    n = 200_000
    y = autograd.dropout(const(np.ones(n), dtype), ratio, training=True).to_numpy()
    assert y.dtype == dtype
    kept = y != 0
    sd = np.sqrt(ratio * (1 - ratio) / n)
    assert abs(kept.mean() - (1 - ratio)) < 6 * sd
    np.testing.assert_allclose(y[kept], 1 / (1 - ratio), rtol=1e-6)
    assert abs(y.mean() - 1.0) < 6 * sd / (1 - ratio)  # inverted dropout keeps the expectation


def test_fresh_mask_every_call_and_reproducible_with_seed():
    x = const(np.ones((100, 100)))
    dev.set_rand_seed(42)
    a = autograd.dropout(x, 0.5).to_numpy()
    b = autograd.dropout(x, 0.5).to_numpy()
    assert (a != b).any()
    dev.set_rand_seed(42)
    np.testing.assert_array_equal(autograd.dropout(x, 0.5).to_numpy(), a)
    np.testing.assert_array_equal(autograd.dropout(x, 0.5).to_numpy(), b)


def test_replaying_forward_draws_a_new_mask_from_the_op_device():
    op = Dropout(0.5, True, dev)
    assert op.device is dev
    x = np.ones((64, 64))
    dev.set_rand_seed(1)
    m1, m2 = op.forward(x), op.forward(x)
    assert (m1 != m2).any()
    dev.set_rand_seed(1)
    np.testing.assert_array_equal(op.forward(x), m1)
    xt = Tensor(data=x, dtype=np.float64, requires_grad=True)
    assert autograd.dropout(xt, 0.5).creator.device is xt.device


def test_identity_in_eval_and_with_ratio_zero():
    x = np.random.default_rng(2).standard_normal((6, 7))
    np.testing.assert_array_equal(autograd.dropout(const(x), 0.5, training=False).to_numpy(), x)
    np.testing.assert_array_equal(autograd.dropout(const(x), 0.0, training=True).to_numpy(), x)
    autograd.training = False
    np.testing.assert_array_equal(autograd.dropout(const(x), 0.7).to_numpy(), x)
    autograd.training = True
    gradcheck(lambda x: autograd.dropout(x, 0.5, training=False), [x])
    gradcheck(lambda x: autograd.dropout(x, 0.0), [x])
    # eval does not consume random numbers
    dev.set_rand_seed(9)
    autograd.dropout(const(x), 0.5, training=False)
    after = autograd.dropout(const(x), 0.5, training=True).to_numpy()
    dev.set_rand_seed(9)
    np.testing.assert_array_equal(autograd.dropout(const(x), 0.5, training=True).to_numpy(), after)


@pytest.mark.parametrize("ratio", [-0.1, 1.0, 1.5])
def test_bad_ratio(ratio):
    with pytest.raises(ValueError, match="dropout"):
        autograd.dropout(const(np.ones(3)), ratio)


@pytest.mark.gpu
def test_gpu_dropout_masks():
    pytest.importorskip("cupy")
    if device.get_num_gpus() == 0:
        pytest.skip("no CUDA GPU visible to cupy")
    gpu = device.create_cuda_gpu()
    x = Tensor(data=np.ones((400, 500), np.float32), device=gpu, requires_grad=True, stores_grad=True)
    gpu.set_rand_seed(4)
    y1 = autograd.dropout(x, 0.3)
    y2 = autograd.dropout(x, 0.3)
    a, b = y1.to_numpy(), y2.to_numpy()
    assert (a != b).any()
    assert abs((a != 0).mean() - 0.7) < 0.01
    np.testing.assert_allclose(a[a != 0], 1 / 0.7, rtol=1e-6)
    g = autograd.gradients(y1, dy=np.full((400, 500), 2.0, np.float32))[x].to_numpy()
    np.testing.assert_allclose(g, 2 * a, rtol=1e-6)
    gpu.set_rand_seed(4)
    np.testing.assert_array_equal(autograd.dropout(x, 0.3).to_numpy(), a)
