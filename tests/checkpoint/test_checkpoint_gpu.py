"""Checkpoints across devices: saved on a GPU, loaded on the CPU and back.

Skipped cleanly where cupy or a CUDA GPU is missing (the CPU side of a GPU-saved file
is also covered without a GPU in test_checkpoint.py)."""

import numpy as np
import pytest
from test_checkpoint_helpers import Net, assert_states_equal, fake_grads, states_of

from singa import checkpoint as ck
from singa import device, opt
from singa.tensor import Tensor

cupy = pytest.importorskip("cupy")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(device.get_num_gpus() == 0, reason="no CUDA GPU visible to cupy"),
]


def on(dev, net):
    for t in net.get_states().values():
        t.to_device(dev)
    return net


def test_gpu_to_cpu_and_back(tmp_path):
    gpu, cpu = device.create_cuda_gpu(), device.get_default_device()
    src = on(gpu, Net(seed=1))
    src.optimizer = opt.SGD(0.1, momentum=0.9)
    fake_grads(src, src.optimizer)
    assert isinstance(src.a.W.data, cupy.ndarray)
    ck.save_model(src, tmp_path / "g.zip", {"t": Tensor(data=np.ones(3, np.float32), device=gpu)})
    assert ck.read(tmp_path / "g.zip").metadata["device"] == "cuda:0"

    dst = Net(seed=2)
    dst.optimizer = opt.SGD(0.1, momentum=0.9)
    aux = ck.load_model(dst, tmp_path / "g.zip")
    assert aux["t"].device is cpu and isinstance(dst.a.W.data, np.ndarray)
    assert_states_equal(states_of(src), states_of(dst))
    assert dst.optimizer.steps == 2

    back = on(gpu, Net(seed=3))
    back.optimizer = opt.SGD(0.1, momentum=0.9)
    w = back.a.W.data
    aux = ck.load_model(back, tmp_path / "g.zip")
    assert back.a.W.data is w and aux["t"].device is gpu  # in place, on the model's device
    assert_states_equal(states_of(src), states_of(back))
    slots = back.optimizer.get_states(back.get_params())["slots"]
    assert set(slots) == set(src.optimizer.get_states(src.get_params())["slots"])
