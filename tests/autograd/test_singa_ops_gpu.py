"""SINGA's operators on a GPU (cupy) against the CPU: values and gradients (skipped
without cupy or a GPU)."""

import numpy as np
import pytest
from gpu_compare import assert_gpu_matches_cpu  # noqa: I001

from singa import autograd

SLOPE = np.full((3, 1), 0.25, np.float32)

FNS = {
    "trig": lambda x: autograd.add(autograd.sin(x), autograd.atan(x)),
    "asinh_cosh": lambda x: autograd.mul(autograd.asinh(x), autograd.cosh(x)),
    "logical": lambda x: autograd.mul(x, autograd._xor(autograd.greater(x, 0.1), autograd.less(x, 0.5))),
    "rounding": lambda x: autograd.add(x, autograd.round(autograd.mul(x, 4.0))),
    "max3": lambda x: autograd.max(x, autograd.neg(x), autograd.mul(x, 0.5)),
    "mean": lambda x: autograd.Mean()(x, autograd.exp(x))[0],
    "reciprocal": lambda x: autograd.reciprocal(autograd.add(autograd.abs(x), 0.5)),
    "prelu": lambda x: autograd.prelu(x, autograd.exp(autograd.mul(x, 0.0))),
    "onehot": lambda x: autograd.mul(
        x, autograd.onehot(-1, autograd.rounde(autograd.abs(x))[:, :, 0], 4, [0.0, 1.0])
    ),
    "scatter": lambda x: autograd.scatter_elements(x, np.array([[[2, 0, 1, 3]]]), x[:1, :1], -1),
    "depth_to_space": lambda x: autograd.depth_to_space(autograd.reshape(x, (1, 12, 1, 2)), 2, "CRD"),
    "upsample": lambda x: autograd.upsample(x, "linear", [1, 2, 1.5]),
    "globalaveragepool": lambda x: autograd.globalaveragepool(x, "channels_last"),
    "cossim": lambda x: autograd.cossim(x[0], x[1]),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", FNS)
def test_gpu_matches_cpu(name):
    x = np.random.default_rng(0).uniform(-1, 1, (2, 3, 4)).astype(np.float32)
    assert_gpu_matches_cpu(FNS[name], [x])
