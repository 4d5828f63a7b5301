"""ONNX export and import of rms_norm (the decomposition before opset 23 and
RMSNormalization from 23, checked by onnxruntime at two batch sizes, and imported back);
import of InstanceNormalization, GroupNormalization, MeanVarianceNormalization, LRN and
LpPool: forward against numpy formulas, float64 gradients through the handlers (each is
built of autograd operators, so imported models fine-tune)."""

import numpy as np
import pytest
from sonnx_helpers import check_export, handler_fn, op_types, rand, run_node_model

from singa import autograd, sonnx, tensor
from singa.autograd.gradcheck import gradcheck


@pytest.mark.parametrize("opset", [13, 17, 18, 23])
@pytest.mark.parametrize("with_scale", [True, False])
def test_rms_norm_exports(opset, with_scale):
    scale = tensor.from_numpy(rand((4, 5), seed=3)) if with_scale else None

    def fn(x):
        return autograd.rms_norm(x, scale, axis=1, eps=1e-5)

    model = check_export(fn, lambda b: [rand((b, 4, 5))], opset=opset)
    assert ("RMSNormalization" in op_types(model)) == (opset >= 23)
    x = rand((2, 4, 5))
    (got,) = sonnx.prepare(model).run([x])
    np.testing.assert_allclose(got, fn(tensor.from_numpy(x)).to_numpy(), rtol=1e-5, atol=1e-6)


# ----- InstanceNormalization, GroupNormalization, MVN, LRN, LpPool (import) -------------------
RNG = np.random.default_rng(0)


def _standardise(x, axes, eps):
    m = x.mean(axis=axes, keepdims=True)
    return (x - m) / np.sqrt(x.var(axis=axes, keepdims=True) + eps)


def test_instance_norm():
    x, s, b = rand((2, 3, 4, 5)), rand((3,), seed=1), rand((3,), seed=2)
    (got,) = run_node_model("InstanceNormalization", {"x": x, "c_s": s, "c_b": b}, epsilon=1e-3)
    want = _standardise(x, (2, 3), 1e-3) * s[:, None, None] + b[:, None, None]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    gradcheck(
        handler_fn("InstanceNormalization", n_inputs=3),
        [RNG.standard_normal((2, 3, 4)), RNG.standard_normal(3), RNG.standard_normal(3)],
    )


@pytest.mark.parametrize("opset", [18, 21])
def test_group_norm_per_group_before_21_per_channel_after(opset):
    x = rand((2, 4, 3))
    n_affine = 2 if opset < 21 else 4
    s, b = rand((n_affine,), seed=1), rand((n_affine,), seed=2)
    (got,) = run_node_model("GroupNormalization", {"x": x, "c_s": s, "c_b": b}, opset=opset, num_groups=2)
    y = _standardise(x.reshape(2, 2, -1), (2,), 1e-5).reshape(x.shape)
    per_c = np.repeat(s, 2) if opset < 21 else s
    per_b = np.repeat(b, 2) if opset < 21 else b
    np.testing.assert_allclose(got, y * per_c[:, None] + per_b[:, None], rtol=1e-4, atol=1e-5)
    xs = [RNG.standard_normal((2, 4, 3)), RNG.standard_normal(n_affine), RNG.standard_normal(n_affine)]
    gradcheck(handler_fn("GroupNormalization", opset=opset, n_inputs=3, num_groups=2), xs)


def test_mean_variance_norm():
    x = rand((2, 3, 4, 2))
    (got,) = run_node_model("MeanVarianceNormalization", {"x": x})
    m = x.mean(axis=(0, 2, 3), keepdims=True)
    want = (x - m) / (np.sqrt((x * x).mean(axis=(0, 2, 3), keepdims=True) - m * m) + 1e-9)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    gradcheck(handler_fn("MeanVarianceNormalization", axes=[0, 2]), [RNG.standard_normal((2, 3, 4))])


@pytest.mark.parametrize("size", [2, 3])
def test_lrn(size):
    x = rand((2, 5, 3, 3))
    (got,) = run_node_model("LRN", {"x": x}, size=size, alpha=0.1, beta=0.6, bias=2.0)
    sq = np.zeros_like(x)
    for c in range(5):
        lo, hi = max(0, c - (size - 1) // 2), min(5, c + (size - 1) - (size - 1) // 2 + 1)
        sq[:, c] = (x[:, lo:hi] ** 2).sum(axis=1)
    np.testing.assert_allclose(got, x / (2.0 + 0.1 / size * sq) ** 0.6, rtol=1e-5)
    gradcheck(
        handler_fn("LRN", size=size, alpha=0.1, beta=0.6, bias=2.0), [RNG.standard_normal((1, 4, 2, 2))]
    )


def test_lp_pool():
    x = rand((1, 2, 5, 5))
    (got,) = run_node_model("LpPool", {"x": x}, kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1], p=3)
    xp = np.pad(np.abs(x) ** 3, ((0, 0), (0, 0), (0, 1), (0, 1)))
    want = xp.reshape(1, 2, 3, 2, 3, 2).sum(axis=(3, 5)) ** (1 / 3)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    gradcheck(handler_fn("LpPool", kernel_shape=[2], p=2), [RNG.uniform(0.5, 1.5, (1, 2, 5))])
