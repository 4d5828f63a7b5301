"""The LoRA layers: forward against numpy twins, float64 gradient checks, frozen base
weights, dropout on the adapter input, scaling (rsLoRA), merge/unmerge, bad arguments."""

import math

import numpy as np
import pytest
from peft_helpers import conv2d_np, lora_linear_np, t32

from singa import autograd, device, layer
from singa.autograd.gradcheck import gradcheck
from singa.peft import Conv2dLoRALayer, LinearLoRALayer, lora_scaling
from singa.tensor import Tensor


@pytest.fixture(autouse=True)
def training():
    prev = autograd.training
    autograd.training = True
    yield
    autograd.training = prev


def _randomize(lora, rng):
    """Non-zero B (a fresh adapter has B = 0, which would hide A in every check)."""
    lora.lora_B.copy_from(rng.standard_normal(lora.lora_B.shape).astype(lora.lora_B.dtype))


def test_linear_lora_forward_matches_numpy_twin_with_leading_dims():
    rng = np.random.default_rng(0)
    lora = LinearLoRALayer(layer.Linear(6, 4), r=3, lora_alpha=6)
    _randomize(lora, rng)
    x = rng.standard_normal((2, 5, 6)).astype(np.float32)
    y = lora(t32(x)).to_numpy()
    base = lora.base_layer
    want = lora_linear_np(
        x, base.W.to_numpy(), base.b.to_numpy(), lora.lora_A.to_numpy(), lora.lora_B.to_numpy(), 2.0
    )
    assert lora.scaling == 2.0
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_fresh_adapter_leaves_output_unchanged_and_has_singa_shapes_and_init():
    device.get_default_device().set_rand_seed(3)
    base = layer.Linear(40, 60)
    lora = LinearLoRALayer(base, r=8)
    assert lora.lora_A.shape == (8, 40) and lora.lora_B.shape == (60, 8)
    assert not lora.lora_B.to_numpy().any()
    std = lora.lora_A.to_numpy().std()
    assert abs(std - math.sqrt(2.0 / 100)) < 0.02  # SINGA: N(0, 2 / (in + out))
    x = t32(np.random.default_rng(1).standard_normal((3, 40)))
    np.testing.assert_array_equal(lora(x).to_numpy(), base(x).to_numpy())


def test_base_weights_are_frozen_and_only_adapters_are_parameters():
    base = layer.Linear(3, 2)
    lora = LinearLoRALayer(base, r=2)
    trainable = [n for n, t in lora.get_params().items() if t.requires_grad]
    assert trainable == ["lora_A", "lora_B"]
    assert set(lora.get_params()) == {
        "base_layer.W",
        "base_layer.b",
        "lora_A",
        "lora_B",
    }  # Model.freeze's way
    assert set(lora.get_states()) == {"base_layer.W", "base_layer.b", "lora_A", "lora_B"}
    assert not base.W.requires_grad and not base.b.requires_grad
    x = t32(np.ones((4, 3)), requires_grad=True)
    loss = autograd.sum(lora(x))
    grads = {id(p): g for p, g in autograd.backward(loss)}
    assert set(grads) == {id(lora.lora_A), id(lora.lora_B)}


def test_lazy_base_gets_adapters_on_first_call_with_input_dtype():
    lora = LinearLoRALayer(layer.Linear(4), r=2)
    assert lora.lora_A is None and lora.get_params() == {}
    y = lora(Tensor(data=np.ones((2, 3)), dtype=np.float64))
    assert y.shape == (2, 4)
    assert lora.lora_A.shape == (2, 3) and lora.lora_A.dtype == np.float64 and lora.lora_B.dtype == np.float64
    assert not lora.base_layer.W.requires_grad


def test_linear_lora_gradcheck_float64():
    rng = np.random.default_rng(2)
    lora = LinearLoRALayer(layer.Linear(3), r=2, lora_alpha=3)
    lora(Tensor(data=np.ones((2, 4)), dtype=np.float64))

    def fn(x, a, b):
        lora.lora_A, lora.lora_B = a, b
        return lora(x)

    arrays = [rng.standard_normal((2, 4)), rng.standard_normal((2, 4)), rng.standard_normal((3, 2))]
    gradcheck(fn, arrays)


def test_conv_lora_forward_matches_numpy_twin_same_padding_stride_dilation():
    rng = np.random.default_rng(4)
    for kw in ({"padding": 1}, {"stride": 2, "pad_mode": "SAME_UPPER"}, {"dilation": 2, "padding": 2}):
        base = layer.Conv2d(2, 5, 3, bias=True, **kw)
        lora = Conv2dLoRALayer(base, r=2, lora_alpha=4, use_rslora=True)
        _randomize(lora, rng)
        x = rng.standard_normal((2, 2, 7, 6)).astype(np.float32)
        y = lora(t32(x)).to_numpy()
        pads = base.pads_for(t32(x))
        geo = {"stride": base.stride, "pads": pads, "dilation": base.dilation}
        want = conv2d_np(x, base.W.to_numpy(), **geo) + base.b.to_numpy()[None, :, None, None]
        h = conv2d_np(x, lora.lora_A.to_numpy(), **geo)
        want += (4 / math.sqrt(2)) * conv2d_np(h, lora.lora_B.to_numpy())
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_conv_lora_relu_activation_applies_after_the_sum():
    rng = np.random.default_rng(5)
    base = layer.Conv2d(1, 3, 1, activation="RELU", bias=False)
    lora = Conv2dLoRALayer(base, r=1)
    _randomize(lora, rng)
    x = rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    pre = (
        conv2d_np(x, base.W.to_numpy())
        + 0.5 * 0
        + conv2d_np(conv2d_np(x, lora.lora_A.to_numpy()), lora.lora_B.to_numpy())
    )
    np.testing.assert_allclose(lora(t32(x)).to_numpy(), np.maximum(pre, 0), rtol=1e-5, atol=1e-5)


def test_conv_lora_gradcheck_float64():
    rng = np.random.default_rng(6)
    lora = Conv2dLoRALayer(layer.Conv2d(2, 3, stride=2, padding=1), r=2, lora_alpha=2)
    lora(Tensor(data=np.ones((1, 2, 5, 5)), dtype=np.float64))

    def fn(x, a, b):
        lora.lora_A, lora.lora_B = a, b
        return lora(x)

    arrays = [
        rng.standard_normal((1, 2, 5, 5)),
        rng.standard_normal((2, 2, 3, 3)),
        rng.standard_normal((2, 2, 1, 1)),
    ]
    gradcheck(fn, arrays)


def test_scaling_and_rslora():
    assert lora_scaling(8, 16) == 2.0
    assert lora_scaling(16, 8, use_rslora=True) == 2.0
    lora = LinearLoRALayer(layer.Linear(2, 2), r=4, lora_alpha=8, use_rslora=True)
    assert lora.scaling == 4.0


def test_dropout_acts_on_the_adapter_input_only_while_training():
    device.get_default_device().set_rand_seed(7)
    rng = np.random.default_rng(7)
    base = layer.Linear(50, 3)
    lora = LinearLoRALayer(base, r=2, lora_dropout=0.5)
    _randomize(lora, rng)
    x = rng.standard_normal((4, 50)).astype(np.float32)
    W, b, A, B = (t.to_numpy() for t in (base.W, base.b, lora.lora_A, lora.lora_B))
    lora.train()
    y_train = lora(t32(x)).to_numpy()
    base_part = x @ W + b
    update = y_train - base_part
    # the update is the adapter of a dropped-out x: x * mask / (1 - p) for a 0/1 mask
    full = (x @ A.T) @ B.T * lora.scaling
    assert not np.allclose(update, full, atol=1e-3)
    lora.eval()
    np.testing.assert_allclose(lora(t32(x)).to_numpy(), base_part + full, rtol=1e-5, atol=1e-5)


def test_merge_and_unmerge_are_exact_to_float32_rounding():
    rng = np.random.default_rng(8)
    for lora, shape in (
        (LinearLoRALayer(layer.Linear(16, 12), r=4, lora_alpha=8), (5, 16)),
        (Conv2dLoRALayer(layer.Conv2d(3, 6, 3, padding=1), r=3, lora_alpha=5), (2, 3, 6, 6)),
    ):
        lora.lora_B.copy_from(rng.standard_normal(lora.lora_B.shape).astype(np.float32))
        x = t32(rng.standard_normal(shape))
        W0 = lora.base_layer.W.to_numpy().copy()
        y0 = lora(x).to_numpy()
        lora.merge_weights(True)
        assert lora.merged
        want_W = (W0.astype(np.float64) + lora.delta_weight()).astype(np.float32)
        np.testing.assert_array_equal(lora.base_layer.W.to_numpy(), want_W)
        y1 = lora(x).to_numpy()
        np.testing.assert_allclose(y1, y0, rtol=1e-6, atol=1e-6 * np.abs(y0).max())
        lora.merge_weights(True)  # merging twice is a no-op (SINGA)
        np.testing.assert_array_equal(lora.base_layer.W.to_numpy(), want_W)
        lora.merge_weights(False)
        assert not lora.merged
        np.testing.assert_allclose(lora.base_layer.W.to_numpy(), W0, rtol=1e-6, atol=1e-6 * np.abs(W0).max())
        np.testing.assert_allclose(lora(x).to_numpy(), y0, rtol=1e-6, atol=1e-6 * np.abs(y0).max())


def test_merged_layer_runs_only_the_base_computation():
    lora = LinearLoRALayer(layer.Linear(3, 2), r=1)
    lora.merge()
    x = t32(np.ones((1, 3)), requires_grad=True)
    y = lora(x)
    np.testing.assert_array_equal(y.to_numpy(), lora.base_layer(x).to_numpy())
    grads = {id(p) for p, _ in autograd.backward(autograd.sum(y))}
    assert id(lora.lora_A) not in grads and id(lora.lora_B) not in grads


def test_bad_arguments():
    with pytest.raises(ValueError, match="positive integer"):
        LinearLoRALayer(layer.Linear(2, 2), r=0)
    with pytest.raises(ValueError, match="lora_dropout"):
        LinearLoRALayer(layer.Linear(2, 2), lora_dropout=1.0)
    with pytest.raises(ValueError, match="lora_alpha"):
        LinearLoRALayer(layer.Linear(2, 2), lora_alpha=float("nan"))
    with pytest.raises(TypeError, match="must be a Linear"):
        LinearLoRALayer(layer.Conv2d(2, 2, 3))
    with pytest.raises(ValueError, match="grouped"):
        Conv2dLoRALayer(layer.Conv2d(4, 4, 3, group=2))
    with pytest.raises(RuntimeError, match="do not exist yet"):
        LinearLoRALayer(layer.Linear(3)).merge()
