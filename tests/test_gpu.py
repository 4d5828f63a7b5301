"""GPU (cupy) path: the same code as on the CPU, compared against CPU results.

Skipped cleanly where cupy or a CUDA GPU is missing.
"""

import numpy as np
import pytest

from singa import autograd, device, opt, tensor

cupy = pytest.importorskip("cupy")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(device.get_num_gpus() == 0, reason="no CUDA GPU visible to cupy"),
]


@pytest.fixture
def gpu():
    return device.create_cuda_gpu()


def test_tensor_round_trip_and_fills(gpu):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = tensor.Tensor(data=a, device=gpu)
    assert isinstance(t.data, cupy.ndarray)
    np.testing.assert_array_equal(t.to_numpy(), a)
    gpu.set_rand_seed(3)
    g1 = tensor.Tensor((1000,), gpu).gaussian(1.0, 2.0).to_numpy()
    gpu.set_rand_seed(3)
    g2 = tensor.Tensor((1000,), gpu).gaussian(1.0, 2.0).to_numpy()
    np.testing.assert_array_equal(g1, g2)
    assert abs(g1.mean() - 1.0) < 0.3 and abs(g1.std() - 2.0) < 0.3
    assert isinstance(t.to_host().data, np.ndarray)


def _mlp_step(dev, x, y, params):
    autograd.training = True
    ws = [tensor.Tensor(data=p, device=dev, requires_grad=True, stores_grad=True) for p in params]
    xt = tensor.Tensor(data=x, device=dev, requires_grad=False)
    yt = tensor.Tensor(data=y, device=dev, requires_grad=False)
    sgd = opt.SGD(0.1, momentum=0.9)
    for _ in range(3):
        h = autograd.relu(autograd.add_bias(autograd.matmul(xt, ws[0]), ws[1]))
        loss = autograd.softmax_cross_entropy(autograd.add_bias(autograd.matmul(h, ws[2]), ws[3]), yt)
        for p, g in autograd.backward(loss):
            sgd.update(p, g)
    return [w.to_numpy() for w in ws], float(loss.to_numpy()[0])


def test_mlp_training_matches_cpu(gpu):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 8)).astype(np.float32)
    y = rng.integers(0, 3, 16)
    params = [rng.standard_normal(s).astype(np.float32) * 0.3 for s in [(8, 5), (5,), (5, 3), (3,)]]
    cpu_w, cpu_loss = _mlp_step(device.get_default_device(), x, y, params)
    gpu_w, gpu_loss = _mlp_step(gpu, x, y, params)
    assert abs(cpu_loss - gpu_loss) < 1e-4
    for a, b in zip(cpu_w, gpu_w):
        np.testing.assert_allclose(a, b, atol=1e-4)


def test_conv_and_pool_match_cpu(gpu):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 9, 9)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    outs = []
    for dev in (device.get_default_device(), gpu):
        xt = tensor.Tensor(data=x, device=dev, requires_grad=False)
        wt = tensor.Tensor(data=w, device=dev)
        y = autograd.max_pool_2d(autograd.conv2d(xt, wt, stride=2, padding=1), 2)
        outs.append(y.to_numpy())
    np.testing.assert_allclose(outs[0], outs[1], atol=1e-4)
