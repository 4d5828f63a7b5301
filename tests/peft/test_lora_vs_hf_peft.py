"""Our LoRA layers against Hugging Face peft's ``LoraLayer`` (outputs and gradients,
rtol 1e-5, same base and adapter weights) when torch and peft are installed, and
against a hand-written numpy twin always."""

import numpy as np
import pytest
from peft_helpers import t32

from singa import autograd, layer
from singa.peft import Conv2dLoRALayer, LinearLoRALayer
from singa.tensor import Tensor


def _hf():
    try:
        import torch
        from peft import LoraConfig
        from peft.tuners.lora import Conv2d as HFConv2d
        from peft.tuners.lora import Linear as HFLinear
    except Exception as e:  # any import failure: not installed, or broken
        pytest.skip(f"torch and peft are needed: {e}")
    return torch, LoraConfig, HFLinear, HFConv2d


@pytest.fixture(autouse=True)
def training():
    prev = autograd.training
    autograd.training = True
    yield
    autograd.training = prev


def _ours(lora, x, proj):
    """Output and gradients (x, lora_A, lora_B) of sum(lora(x) * proj)."""
    tx = Tensor(data=x, requires_grad=True, stores_grad=True)
    y = lora(tx)
    loss = autograd.sum(autograd.mul(y, t32(proj)))
    grads = {id(p): g.to_numpy() for p, g in autograd.backward(loss)}
    return y.to_numpy(), grads[id(tx)], grads[id(lora.lora_A)], grads[id(lora.lora_B)]


def _linear(rslora):
    rng = np.random.default_rng(0)
    lora = LinearLoRALayer(layer.Linear(7, 5), r=3, lora_alpha=6, use_rslora=rslora)
    lora.lora_B.copy_from(rng.standard_normal((5, 3)).astype(np.float32))
    x = rng.standard_normal((4, 7)).astype(np.float32)
    proj = rng.standard_normal((4, 5)).astype(np.float32)
    return lora, x, proj


@pytest.mark.parametrize("rslora", [False, True])
def test_linear_equals_hf_peft(rslora):
    torch, LoraConfig, HFLinear, _ = _hf()
    lora, x, proj = _linear(rslora)
    y, gx, gA, gB = _ours(lora, x, proj)
    base = torch.nn.Linear(7, 5)
    with torch.no_grad():
        base.weight.copy_(torch.from_numpy(lora.base_layer.W.to_numpy().T.copy()))
        base.bias.copy_(torch.from_numpy(lora.base_layer.b.to_numpy()))
    cfg = LoraConfig(r=3, lora_alpha=6, use_rslora=rslora)
    hf = HFLinear(base, "default", config=cfg, r=3, lora_alpha=6, use_rslora=rslora)
    assert hf.scaling["default"] == pytest.approx(lora.scaling)
    with torch.no_grad():
        hf.lora_A["default"].weight.copy_(torch.from_numpy(lora.lora_A.to_numpy()))
        hf.lora_B["default"].weight.copy_(torch.from_numpy(lora.lora_B.to_numpy()))
    tx = torch.from_numpy(x).requires_grad_()
    out = hf(tx)
    (out * torch.from_numpy(proj)).sum().backward()
    np.testing.assert_allclose(y, out.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gA, hf.lora_A["default"].weight.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gB, hf.lora_B["default"].weight.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rslora", [False, True])
def test_linear_equals_numpy_twin(rslora):
    lora, x, proj = _linear(rslora)
    y, gx, gA, gB = _ours(lora, x, proj)
    W, b = lora.base_layer.W.to_numpy().astype(np.float64), lora.base_layer.b.to_numpy()
    A, B = lora.lora_A.to_numpy().astype(np.float64), lora.lora_B.to_numpy().astype(np.float64)
    s = 6 / np.sqrt(3) if rslora else 2.0
    x64, G = x.astype(np.float64), proj.astype(np.float64)
    np.testing.assert_allclose(y, x64 @ W + b + s * (x64 @ A.T) @ B.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gx, G @ W.T + s * (G @ B) @ A, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gA, s * (G @ B).T @ x64, rtol=1e-5, atol=1e-5)  # dL/dA = s B^T G^T x
    np.testing.assert_allclose(gB, s * G.T @ (x64 @ A.T), rtol=1e-5, atol=1e-5)  # dL/dB = s G^T (x A^T)


def test_conv2d_equals_hf_peft():
    torch, LoraConfig, _, HFConv2d = _hf()
    rng = np.random.default_rng(1)
    lora = Conv2dLoRALayer(layer.Conv2d(3, 4, 3, stride=2, padding=1), r=2, lora_alpha=3)
    lora.lora_B.copy_from(rng.standard_normal((4, 2, 1, 1)).astype(np.float32))
    x = rng.standard_normal((2, 3, 7, 7)).astype(np.float32)
    proj = rng.standard_normal((2, 4, 4, 4)).astype(np.float32)
    y, gx, gA, gB = _ours(lora, x, proj)
    base = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)
    with torch.no_grad():
        base.weight.copy_(torch.from_numpy(lora.base_layer.W.to_numpy()))
        base.bias.copy_(torch.from_numpy(lora.base_layer.b.to_numpy()))
    hf = HFConv2d(base, "default", config=LoraConfig(r=2, lora_alpha=3), r=2, lora_alpha=3)
    with torch.no_grad():
        hf.lora_A["default"].weight.copy_(torch.from_numpy(lora.lora_A.to_numpy()))
        hf.lora_B["default"].weight.copy_(torch.from_numpy(lora.lora_B.to_numpy()))
    tx = torch.from_numpy(x).requires_grad_()
    out = hf(tx)
    (out * torch.from_numpy(proj)).sum().backward()
    np.testing.assert_allclose(y, out.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gA, hf.lora_A["default"].weight.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gB, hf.lora_B["default"].weight.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_merge_equals_hf_peft_merge():
    torch, LoraConfig, HFLinear, _ = _hf()
    lora, x, _ = _linear(False)
    base = torch.nn.Linear(7, 5)
    with torch.no_grad():
        base.weight.copy_(torch.from_numpy(lora.base_layer.W.to_numpy().T.copy()))
    hf = HFLinear(base, "default", config=LoraConfig(r=3, lora_alpha=6), r=3, lora_alpha=6)
    with torch.no_grad():
        hf.lora_A["default"].weight.copy_(torch.from_numpy(lora.lora_A.to_numpy()))
        hf.lora_B["default"].weight.copy_(torch.from_numpy(lora.lora_B.to_numpy()))
    hf.merge()
    lora.merge()
    np.testing.assert_allclose(
        lora.base_layer.W.to_numpy().T, base.weight.detach().numpy(), rtol=1e-6, atol=1e-6
    )
