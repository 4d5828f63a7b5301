"""The NCCL engine (cupy) on a GPU: a one-rank communicator made from an
NcclIdHolder, its collectives, and DistOpt training a GPU model through it. Two
ranks need two GPUs (NCCL refuses two ranks on one device): that test runs only
where two are visible. Skipped without cupy and a GPU."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from singa import device, opt, tensor, zoo  # noqa: E402
from singa.parallel import NcclEngine, NcclIdHolder  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import dist_worker as worker  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(device.get_num_gpus() == 0, reason="no CUDA GPU visible to cupy"),
]


def test_one_rank_nccl_collectives():
    eng = NcclEngine(NcclIdHolder(), local_rank=0, world_size=1)
    a = cupy.arange(6, dtype=cupy.float32)
    assert eng.allreduce(a) is a
    np.testing.assert_array_equal(a.get(), np.arange(6))
    h = cupy.asarray([1.5, -2.0], dtype=cupy.float16)
    np.testing.assert_array_equal(eng.allreduce(h).get(), [1.5, -2.0])
    g = eng.allgather(cupy.asarray([3, 4], dtype=cupy.int32))
    assert g.shape == (1, 2) and g.get().tolist() == [[3, 4]]
    assert eng.broadcast(a) is a and eng.sum_scalars([2.0, 3.0]) == [2.0, 3.0]


def test_distopt_over_nccl_trains_like_the_wrapped_optimizer():
    gpu = device.create_cuda_gpu()
    x, y = worker.dataset()
    results = []
    for wrap in (False, True):
        gpu.set_rand_seed(0)
        m = zoo.create("cnn", num_classes=4, num_channels=1, kernels=(4, 8), hidden=16)
        o = opt.SGD(0.05, momentum=0.9)
        if wrap:
            o = opt.DistOpt(o, nccl_id=NcclIdHolder(), local_rank=0, world_size=1)
        m.set_optimizer(o)
        m.compile([tensor.from_numpy(x[:16], gpu)], is_train=True, use_graph=True)
        for j in range(3):
            m(
                tensor.from_numpy(x[16 * j : 16 * j + 16], gpu),
                tensor.from_numpy(y[16 * j : 16 * j + 16], gpu),
            )
        results.append({n: t.to_numpy() for n, t in m.get_params().items()})
    for k in results[0]:
        np.testing.assert_array_equal(results[0][k], results[1][k], err_msg=k)


@pytest.mark.skipif(device.get_num_gpus() < 2, reason="two ranks need two GPUs")
def test_two_gpus_by_multiprocessing_example():
    import subprocess

    script = os.path.join(
        os.path.dirname(__file__), "..", "..", "examples", "parallel", "train_multiprocess.py"
    )
    r = subprocess.run(
        [sys.executable, script, "cnn", "fashion-mnist-mini", "-w", "2", "-m", "1", "--max-steps", "5"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "epoch 1:" in r.stdout
