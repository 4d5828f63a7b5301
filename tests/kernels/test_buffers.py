"""The buffer pool's layout-keeping arrays, and ReLU's pooled outputs."""

import numpy as np

from singa import autograd
from singa.kernels import buffers
from singa.tensor import Tensor


def test_scratch_like_keeps_the_memory_layout():
    nhwc = np.zeros((2, 5, 6, 3), np.float32).transpose(0, 3, 1, 2)  # NCHW view of NHWC memory
    a = buffers.scratch_like(np, nhwc)
    assert a.shape == nhwc.shape and a.strides == nhwc.strides and a.dtype == np.float32
    f = np.asfortranarray(np.zeros((4, 7)))
    b = buffers.scratch_like(np, f, np.float32)
    assert b.shape == (4, 7) and b.flags.f_contiguous and b.dtype == np.float32
    gappy = np.zeros((4, 8))[:, ::2]  # not dense in any order: C order
    assert buffers.scratch_like(np, gappy).flags.c_contiguous
    assert buffers.scratch_like(np, np.zeros(3)).shape == (3,)
    assert buffers.is_pooled(a.base) and buffers.is_pooled(buffers.scratch_like(np, np.zeros((2, 2))))


def test_relu_outputs_come_from_the_pool_and_are_never_shared_while_alive():
    rng = np.random.default_rng(0)
    x1, x2 = rng.standard_normal((2, 64, 9))
    t1 = Tensor(data=x1, dtype=x1.dtype, requires_grad=True, stores_grad=True)
    t2 = Tensor(data=x2, dtype=x2.dtype, requires_grad=True, stores_grad=True)
    y1, y2 = autograd.relu(t1), autograd.relu(t2)
    assert y1.data is not y2.data
    np.testing.assert_array_equal(y1.to_numpy(), np.maximum(x1, 0))
    np.testing.assert_array_equal(y2.to_numpy(), np.maximum(x2, 0))
    g1 = autograd.gradients(y1, np.full(x1.shape, 2.0))[t1].to_numpy()
    g2 = autograd.gradients(y2, np.full(x2.shape, 3.0))[t2].to_numpy()
    np.testing.assert_array_equal(g1, 2.0 * (x1 > 0))
    np.testing.assert_array_equal(g2, 3.0 * (x2 > 0))
    np.testing.assert_array_equal(y1.to_numpy(), np.maximum(x1, 0))  # untouched by the later calls
