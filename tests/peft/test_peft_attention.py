"""LoRA on MultiHeadAttention: a targeted attention layer has its four projections
adapted; the adapted layer equals attention with the updated weights written in."""

import numpy as np
import pytest
from peft_helpers import t32

from singa import autograd, device, layer, model
from singa.peft import LinearLoraConfig, LinearLoRALayer, get_peft_model


class Block(model.Model):
    def __init__(self):
        super().__init__()
        self.attn = layer.MultiHeadAttention(8, 2)
        self.fc = layer.Linear(8, 4)

    def forward(self, x):
        y, _ = self.attn(x)
        return self.fc(y)


def _block():
    device.get_default_device().set_rand_seed(0)
    b = Block()
    b.compile([t32(np.zeros((2, 5, 8)))], is_train=False)
    return b


def test_attention_target_adapts_its_four_projections_and_globs_pick_some():
    pm = get_peft_model(_block(), LinearLoraConfig(r=2, target_layers=["attn"]))
    assert pm.tuner.targeted_layers == ["attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.out_proj"]
    assert all(isinstance(lora, LinearLoRALayer) for lora in pm.tuner.lora_layers(pm.base_model).values())
    pm2 = get_peft_model(_block(), LinearLoraConfig(r=2, target_layers=["*.q_proj", "*.v_proj"]))
    assert pm2.tuner.targeted_layers == ["attn.q_proj", "attn.v_proj"]
    pm3 = get_peft_model(_block(), LinearLoraConfig(r=2, target_layers=["*attn*"]))  # no duplicates
    assert pm3.tuner.targeted_layers == ["attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.out_proj"]


def test_adapted_attention_equals_attention_with_updated_weights():
    pm = get_peft_model(_block(), LinearLoraConfig(r=2, lora_alpha=3, target_layers=["attn"]))
    rng = np.random.default_rng(1)
    for t in pm.get_params().values():
        t.copy_from(rng.standard_normal(t.shape).astype(np.float32) * 0.5)
    x = t32(rng.standard_normal((2, 5, 8)))
    pm.eval()
    y = pm(x).to_numpy()
    twin = _block()
    for path, lora in pm.tuner.lora_layers(pm.base_model).items():
        W = lora.base_layer.W.to_numpy().astype(np.float64)
        A, B = lora.lora_A.to_numpy().astype(np.float64), lora.lora_B.to_numpy().astype(np.float64)
        twin.set_states({f"{path}.W": (W + 1.5 * A.T @ B.T).astype(np.float32)}, strict=False)
    twin.eval()
    want = twin(x).to_numpy()
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    pm.merge_weights(True)
    np.testing.assert_allclose(pm(x).to_numpy(), y, rtol=1e-6, atol=1e-6 * np.abs(y).max())


def test_gradients_reach_every_projection_adapter():
    pm = get_peft_model(_block(), LinearLoraConfig(r=2, target_layers=["attn"]))
    for n, t in pm.get_params().items():
        if n.endswith("lora_B"):
            t.set_value(0.1)
    prev = autograd.training
    autograd.training = True
    try:
        loss = autograd.sum(pm.base_model.forward(t32(np.random.default_rng(2).standard_normal((2, 5, 8)))))
        grads = {id(p) for p, _ in autograd.backward(loss)}
    finally:
        autograd.training = prev
    params = pm.get_params()
    assert len(params) == 8
    assert grads == {id(t) for t in params.values()}


def test_bad_attention_target():
    with pytest.raises(ValueError, match="'attn.nope' is not a layer"):
        get_peft_model(_block(), LinearLoraConfig(target_layers=["attn.nope"]))


def test_zoo_gpt_attention_adapters_train_and_merge():
    from singa import opt, tensor, zoo

    device.get_default_device().set_rand_seed(0)
    gpt = zoo.create("gpt", num_classes=11, num_layers=1, num_heads=2, width=8, context=6)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 11, (2, 7)).astype(np.int32)
    tx, ty = tensor.from_numpy(tokens[:, :-1]), tensor.from_numpy(tokens[:, 1:])
    gpt.compile([tx], is_train=False)
    frozen = {n: t.to_numpy().copy() for n, t in gpt.get_states().items()}
    pm = get_peft_model(gpt, LinearLoraConfig(r=2, lora_alpha=4, target_layers=["blocks.*.self_attn"]))
    assert len(pm.tuner.targeted_layers) == 4
    pm.set_optimizer(opt.Adam(0.05))
    pm.compile([tx], is_train=True, use_graph=True)
    losses = [pm(tx, ty)[1].item() for _ in range(5)]
    assert losses[-1] < losses[0]
    states = pm.get_states()
    for n, before in frozen.items():
        now = states[n] if n in states else states[n.replace("_proj.", "_proj.base_layer.")]
        np.testing.assert_array_equal(now.to_numpy(), before)
    pm.eval()
    y = pm(tx).to_numpy()
    plain = pm.merge_and_unload()
    np.testing.assert_allclose(plain(tx).to_numpy(), y, rtol=1e-5, atol=1e-5 * np.abs(y).max())
