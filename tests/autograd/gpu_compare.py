"""GPU (cupy) comparisons shared by the operator tests: run an operator and its gradients
on the CPU and on a GPU and compare (skipped without cupy or a GPU)."""

import numpy as np
import pytest

from singa import autograd, device
from singa.tensor import Tensor


def gpu_or_skip():
    pytest.importorskip("cupy")
    if device.get_num_gpus() == 0:
        pytest.skip("no CUDA GPU visible to cupy")
    return device.create_cuda_gpu()


def run_on(dev, fn, arrays):
    """fn's output and the gradients of the float inputs for a fixed random dy."""
    ts = [
        Tensor(
            data=a,
            device=dev,
            dtype=a.dtype,
            requires_grad=a.dtype.kind == "f",
            stores_grad=a.dtype.kind == "f",
        )
        for a in arrays
    ]
    y = fn(*ts)
    dy = np.random.default_rng(0).standard_normal(y.shape).astype(y.dtype)
    g = autograd.gradients(y, dy=dy)
    return [y.to_numpy()] + [g[t].to_numpy() for t in ts if t in g]


def assert_gpu_matches_cpu(fn, arrays, atol=1e-5):
    gpu = gpu_or_skip()
    cpu_out = run_on(device.get_default_device(), fn, arrays)
    gpu_out = run_on(gpu, fn, arrays)
    assert len(cpu_out) == len(gpu_out)
    for c, g in zip(cpu_out, gpu_out):
        np.testing.assert_allclose(g, c, atol=atol, rtol=1e-4)
