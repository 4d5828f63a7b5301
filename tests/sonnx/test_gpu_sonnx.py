"""ONNX export from and import onto a CUDA GPU (cupy), compared with the CPU.

Skipped cleanly where cupy or a CUDA GPU is missing.
"""

import numpy as np
import pytest
from sonnx_helpers import rand

from singa import autograd, device, layer, model, opt, sonnx, tensor
from singa.autograd.conv_transpose import conv_transpose2d

cupy = pytest.importorskip("cupy")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(device.get_num_gpus() == 0, reason="no CUDA GPU visible to cupy"),
]


class Net(model.Model):
    def __init__(self):
        super().__init__()
        self.conv = layer.Conv2d(4, 3, padding=(1, 0, 1, 2))
        self.bn = layer.BatchNorm2d()
        self.fc = layer.Linear(3)

    def forward(self, x):
        y = autograd.relu(self.bn(self.conv(x)))
        return self.fc(autograd.flatten(autograd.max_pool_2d(y, 2, 2, ceil_mode=True)))


def test_export_on_gpu_matches_cpu_export():
    gpu = device.create_cuda_gpu()
    x = rand((3, 2, 6, 5))
    net = Net()
    xc = tensor.from_numpy(x)
    m_cpu = sonnx.to_onnx([xc], net)
    for t in net.get_states().values():
        t.to_device(gpu)
    m_gpu = sonnx.to_onnx([tensor.from_numpy(x, gpu)], net)
    assert m_cpu.graph == m_gpu.graph


def test_prepare_and_fine_tune_on_gpu():
    net = Net()
    x = rand((4, 2, 6, 5))
    m = sonnx.to_onnx([tensor.from_numpy(x)], net)
    (want,) = sonnx.prepare(m, "CPU").run([x])
    (got,) = sonnx.prepare(m, "CUDA").run([x])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    gpu = device.create_cuda_gpu()
    sm = sonnx.SONNXModel(m, gpu)
    assert isinstance(next(iter(sm.params.values())).data, cupy.ndarray)
    sm.set_optimizer(opt.SGD(lr=0.05))
    sm.train()
    xt = tensor.from_numpy(x, gpu)
    yt = tensor.from_numpy(np.arange(4, dtype=np.int64) % 3, gpu)
    losses = [float(sm(xt, yt)[1]) for _ in range(4)]
    assert losses[-1] < losses[0]


def test_conv_transpose_on_gpu():
    gpu = device.create_cuda_gpu()
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 4, 5, 4)), rng.standard_normal((4, 3, 3, 3))
    want = conv_transpose2d(tensor.from_numpy(x), tensor.from_numpy(w), None, 2, 1, 1, 1, 2).to_numpy()
    got = conv_transpose2d(tensor.from_numpy(x, gpu), tensor.from_numpy(w, gpu), None, 2, 1, 1, 1, 2)
    np.testing.assert_allclose(got.to_numpy(), want, atol=1e-10)
