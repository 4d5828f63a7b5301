"""The compiled layer norm (singa.kernels.layer_norm, taken by float32 and float64 numpy
arrays) against the array expression it replaces and a numpy formula, its float64
gradients against finite differences, and its bits against the worker count."""

import numpy as np
import pytest

from singa import autograd
from singa.autograd.gradcheck import gradcheck
from singa.autograd.normalization import LayerNorm
from singa.kernels import workers
from singa.tensor import Tensor


def formula(x, scale, bias, axis, eps):
    axes = tuple(range(axis, x.ndim))
    m = x.mean(axis=axes, keepdims=True)
    v = ((x - m) ** 2).mean(axis=axes, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * scale + bias


def run(x, scale, bias, dy, axis=-1, array_path=False):
    """Forward and the three gradients of one LayerNorm operator, by the kernels or
    (``array_path``) by the array expression."""
    op = LayerNorm(axis % x.ndim, 1e-5)
    op.requires_grad = True
    op.needs_grad = (True, True, True)
    if array_path:
        xp = np
        d = int(np.prod(x.shape[axis % x.ndim :]))
        y = op._forward_expression(
            xp, x.reshape(-1, d), scale.reshape(d), bias.reshape(d), (scale.shape, bias.shape)
        )
        y = y.reshape(x.shape)
    else:
        y = op.forward(x, scale, bias)
    return (y, *op.backward(dy))


@pytest.mark.parametrize("shape, axis", [((6, 7, 33), -1), ((4, 3, 5), 1), ((300, 128), -1)])
def test_float32_kernel_equals_the_float64_expression(shape, axis):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    inner = shape[axis % len(shape) :]
    scale = rng.standard_normal(inner).astype(np.float32)
    bias = rng.standard_normal(inner).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    got = run(x, scale, bias, dy, axis)
    want = run(*(a.astype(np.float64) for a in (x, scale, bias, dy)), axis, array_path=True)
    assert [g.dtype for g in got] == [np.float32] * 4
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5 * np.abs(w).max())
    np.testing.assert_allclose(
        got[0], formula(x.astype(np.float64), scale, bias, axis % x.ndim, 1e-5), atol=1e-5
    )


def test_float64_gradients_and_forward():
    rng = np.random.default_rng(1)
    x, s, b = rng.standard_normal((3, 4, 5)), rng.standard_normal(5), rng.standard_normal(5)
    y = autograd.layer_norm(
        Tensor(data=x, dtype=np.float64), Tensor(data=s, dtype=np.float64), Tensor(data=b, dtype=np.float64)
    ).to_numpy()
    np.testing.assert_allclose(y, formula(x, s, b, 2, 1e-5), rtol=1e-12, atol=1e-12)
    gradcheck(
        lambda a, c, d: autograd.layer_norm(a, c, d, axis=1), [x, rng.standard_normal((4, 5)), b * 0 + 0.5]
    )
    gradcheck(lambda a, c: autograd.layer_norm(a, c, None), [x.transpose(2, 0, 1), s[:4]])


def test_bits_do_not_depend_on_the_worker_count():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4096, 128)).astype(np.float32)  # several row pieces
    scale, bias = rng.standard_normal(128).astype(np.float32), rng.standard_normal(128).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    assert len(workers.work_pieces(4096, 3 * x.size)) > 1
    outs = []
    try:
        for count in (1, 2):
            workers.set_worker_count(count)
            outs.append([a.copy() for a in run(x, scale, bias, dy)])
    finally:
        workers.set_worker_count(None)
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)
