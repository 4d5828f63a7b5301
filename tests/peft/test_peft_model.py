"""get_peft_model / PeftModel: targets by name and glob, frozen base (no gradient, no
optimizer slots), training moves only the adapters, graph mode == eager, merging,
merge_and_unload, the trainable fraction, modules_to_save, SINGA's calling forms."""

import numpy as np
import pytest
from peft_helpers import MLP, ConvNet, t32

from singa import device, layer, opt, tensor
from singa.peft import (
    Conv2dLoRALayer,
    LinearLoraConfig,
    LinearLoRALayer,
    LinearLoraTuner,
    PeftModel,
    PeftRegistry,
    get_peft_model,
)


def _mlp(seed=0):
    device.get_default_device().set_rand_seed(seed)
    m = MLP()
    m.set_optimizer(opt.SGD(0.1))
    m.compile([t32(np.zeros((8, 6)))], is_train=True)
    return m


def _data(seed=1, n=8):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 6)).astype(np.float32)
    return t32(x), tensor.from_numpy((x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0))


def test_singa_calling_forms_train_only_the_adapters():
    m = _mlp()
    base_states = {n: t.to_numpy().copy() for n, t in m.get_states().items()}
    config = LinearLoraConfig(4, 1, 0.0, ["linear1", "linear2"])  # SINGA's positional form
    pm = get_peft_model(m, config)
    assert isinstance(pm, PeftModel) and pm.base_model is m and pm.dimension == 2
    assert isinstance(m.linear1, LinearLoRALayer) and pm.tuner.targeted_layers == ["linear1", "linear2"]
    sgd = opt.SGD(lr=0.5, momentum=0.9, weight_decay=1e-5)
    pm.set_optimizer(sgd)
    assert pm.optimizer is sgd and m.optimizer is sgd
    tx, ty = _data()
    pm.compile([tx], is_train=True, use_graph=False, sequential=True)
    pm.train()
    for _ in range(3):
        out, loss = pm(tx, ty, "plain", None)
    assert sorted(pm.get_params()) == ["linear1.lora_A", "linear1.lora_B", "linear2.lora_A", "linear2.lora_B"]
    assert np.abs(m.linear2.lora_B.to_numpy()).max() > 0
    for name, before in base_states.items():
        new_name = name.replace(".", ".base_layer.")
        np.testing.assert_array_equal(m.get_states()[new_name].to_numpy(), before)
    slots = sgd.get_states(pm.get_params())["slots"]
    assert sorted({k.split("/")[0] for k in slots}) == sorted(pm.get_params())  # no slots for frozen weights


def test_graph_mode_equals_eager():
    results = []
    for use_graph in (False, True):
        pm = get_peft_model(_mlp(), LinearLoraConfig(r=2, lora_alpha=4, target_layers="*"))
        pm.set_optimizer(opt.SGD(0.3, momentum=0.9))
        tx, ty = _data()
        pm.compile([tx], is_train=True, use_graph=use_graph)
        losses = [pm(tx, ty)[1].to_numpy().copy() for _ in range(4)]
        results.append((losses, {n: t.to_numpy().copy() for n, t in pm.get_states().items()}))
    (l0, s0), (l1, s1) = results
    np.testing.assert_array_equal(np.array(l0), np.array(l1))
    assert s0.keys() == s1.keys()
    for n in s0:
        np.testing.assert_array_equal(s0[n], s1[n])


def test_globs_nested_containers_conv_and_default_targets():
    device.get_default_device().set_rand_seed(2)
    net = ConvNet()
    net.compile([t32(np.zeros((2, 3, 6, 6)))], is_train=False)
    pm = get_peft_model(net, LinearLoraConfig(r=2, target_layers=["*conv*", "blocks.*"]))
    assert pm.tuner.targeted_layers == ["conv1", "blocks.0"]
    assert isinstance(net.conv1, Conv2dLoRALayer) and isinstance(net.blocks[0], Conv2dLoRALayer)
    assert sorted(pm.get_params()) == ["blocks.0.lora_A", "blocks.0.lora_B", "conv1.lora_A", "conv1.lora_B"]
    assert not net.bn1.scale.requires_grad  # the whole base is frozen
    net2 = ConvNet()
    net2.compile([t32(np.zeros((2, 3, 6, 6)))], is_train=False)
    assert get_peft_model(net2, LinearLoraConfig()).tuner.targeted_layers == ["fc"]  # None: every Linear


def test_lazy_model_gets_adapters_at_compile():
    device.get_default_device().set_rand_seed(3)
    pm = get_peft_model(ConvNet(), LinearLoraConfig(r=2, target_layers=["conv1", "fc"]))
    assert pm.get_params() == {}
    pm.set_optimizer(opt.SGD(0.1))
    pm.compile([t32(np.zeros((2, 3, 6, 6)))], is_train=True)
    assert sorted(pm.get_params()) == ["conv1.lora_A", "conv1.lora_B", "fc.lora_A", "fc.lora_B"]
    assert pm.get_params()["fc.lora_A"].name == "fc.lora_A"
    assert not pm.base_model.conv1.base_layer.W.requires_grad
    assert not pm.base_model.blocks[0].W.requires_grad  # created by compile, frozen then


def test_bad_targets_change_nothing():
    m = _mlp()
    before = dict(m.get_params())
    with pytest.raises(ValueError, match="'nope' is not a layer of the model"):
        get_peft_model(m, LinearLoraConfig(target_layers=["linear1", "nope"]))
    with pytest.raises(ValueError, match="'relu' is a ReLU, which cannot be adapted"):
        get_peft_model(m, LinearLoraConfig(target_layers=["relu"]))
    with pytest.raises(
        ValueError, match=r"'\*soft\*' matches no supported layer \(it matches only SoftMaxCrossEntropy\)"
    ):
        get_peft_model(m, LinearLoraConfig(target_layers=["*soft*"]))
    assert m.get_params() == before and isinstance(m.linear1, layer.Linear)
    with pytest.raises(TypeError, match="PeftConfig"):
        PeftModel(m, {"r": 8})
    pm = get_peft_model(m, LinearLoraConfig(target_layers=["linear1"]))
    with pytest.raises(ValueError, match="holds LoRA layers already"):
        get_peft_model(pm.base_model, LinearLoraConfig(target_layers=["linear2"]))


def test_config_validation():
    with pytest.raises(ValueError, match="r must be a positive integer"):
        LinearLoraConfig(r=0)
    with pytest.raises(ValueError, match="lora_dropout"):
        LinearLoraConfig(lora_dropout=-0.1)
    with pytest.raises(TypeError, match="target_layers"):
        LinearLoraConfig(target_layers=[1])
    c = LinearLoraConfig(r=4, lora_alpha=8, target_layers="*fc*", use_rslora=True)
    assert c.target_layers == ["*fc*"] and c.scaling == 4.0
    assert LinearLoraConfig.from_dict(c.to_dict()) == c
    with pytest.raises(ValueError, match="unknown keys"):
        LinearLoraConfig.from_dict({**c.to_dict(), "bias": "all"})


def test_merge_weights_and_merge_and_unload():
    pm = get_peft_model(_mlp(), LinearLoraConfig(r=2, lora_alpha=2, target_layers=["linear*"]))
    rng = np.random.default_rng(5)
    for lora in pm.tuner.lora_layers(pm.base_model).values():
        lora.lora_B.copy_from(rng.standard_normal(lora.lora_B.shape).astype(np.float32))
    tx, _ = _data()
    pm.eval()
    pm.graph(True)
    y0 = pm(tx).to_numpy().copy()
    pm.merge_weights(True)  # the trace of the unmerged model must not be replayed
    y1 = pm(tx).to_numpy().copy()
    np.testing.assert_allclose(y1, y0, rtol=1e-6, atol=1e-6 * np.abs(y0).max())
    pm.merge_weights(False)
    np.testing.assert_allclose(pm(tx).to_numpy(), y0, rtol=1e-6, atol=1e-6 * np.abs(y0).max())
    plain = pm.merge_and_unload()
    assert isinstance(plain, MLP) and type(plain.linear1) is layer.Linear
    assert sorted(plain.get_params()) == ["linear1.W", "linear1.b", "linear2.W", "linear2.b"]
    np.testing.assert_allclose(plain(tx).to_numpy(), y0, rtol=1e-6, atol=1e-6 * np.abs(y0).max())


def test_trainable_fraction_counts_frozen_weights():
    pm = get_peft_model(_mlp(), LinearLoraConfig(r=2, target_layers=["linear1"]))
    base = 6 * 5 + 5 + 5 * 3 + 3
    trainable = 2 * 6 + 5 * 2
    total = base + trainable  # as peft counts: every parameter, the adapters included
    assert pm.get_nb_trainable_parameters() == (trainable, total)
    assert pm.trainable_fraction() == pytest.approx(trainable / total)


def test_print_trainable_parameters(capsys):
    pm = get_peft_model(_mlp(), LinearLoraConfig(r=1, target_layers=["linear2"]))
    pm.print_trainable_parameters()
    assert capsys.readouterr().out.strip() == "trainable params: 8 || all params: 61 || trainable%: 13.1148"


def test_modules_to_save_stay_trainable():
    pm = get_peft_model(_mlp(), LinearLoraConfig(r=2, target_layers=["linear1"], modules_to_save=["linear2"]))
    assert sorted(pm.get_params()) == ["linear1.lora_A", "linear1.lora_B", "linear2.W", "linear2.b"]
    with pytest.raises(ValueError, match="both adapted and trained"):
        get_peft_model(_mlp(), LinearLoraConfig(target_layers=["linear1"], modules_to_save=["linear1"]))


def test_freeze_base_model_false_keeps_other_parameters_trainable():
    pm = get_peft_model(_mlp(), LinearLoraConfig(r=2, target_layers=["linear1"], freeze_base_model=False))
    assert sorted(pm.get_params()) == ["linear1.lora_A", "linear1.lora_B", "linear2.W", "linear2.b"]


def test_registry():
    assert PeftRegistry.get_tuner("linear_lora") is LinearLoraTuner
    with pytest.raises(ValueError, match="Unsupported peft method: 'prefix'"):
        PeftRegistry.get_tuner("prefix")


def test_seeded_runs_repeat_exactly_with_dropout():
    runs = []
    for _ in range(2):
        pm = get_peft_model(_mlp(seed=9), LinearLoraConfig(r=2, lora_dropout=0.3, target_layers="*"))
        pm.set_optimizer(opt.SGD(0.2))
        tx, ty = _data()
        pm.compile([tx], is_train=True)
        runs.append([pm(tx, ty)[1].to_numpy().copy() for _ in range(3)])
    np.testing.assert_array_equal(np.array(runs[0]), np.array(runs[1]))


def test_summary_shows_the_trainable_fraction():
    pm = get_peft_model(_mlp(), LinearLoraConfig(r=2, target_layers=["linear1"]))
    text = pm.summary(print_fn=None)
    base, trainable = 6 * 5 + 5 + 5 * 3 + 3, 2 * 6 + 5 * 2
    assert f"Trainable params: {trainable:,}" in text
    assert f"Non-trainable params: {base:,}" in text
    assert f"Trainable fraction: {100 * trainable / (base + trainable):.2f}%" in text


def test_merge_and_unload_function_needs_no_tuner():
    from singa.peft import merge_and_unload

    m = _mlp()
    pm = get_peft_model(m, LinearLoraConfig(r=2, target_layers="*"))
    for t in pm.get_params().values():
        t.set_value(0.25)
    tx, _ = _data()
    pm.eval()
    want = pm(tx).to_numpy()
    assert merge_and_unload(m) is m
    assert type(m.linear1) is layer.Linear and type(m.linear2) is layer.Linear
    assert "linear1.W" in m.get_states()
    np.testing.assert_allclose(m(tx).to_numpy(), want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


def test_mixed_precision_casts_the_frozen_weights_and_trains_the_adapters():
    m = MLP()
    m.compile([t32(np.zeros((8, 6)))], is_train=False)
    pm = get_peft_model(m, LinearLoraConfig(r=2, target_layers=["linear1"]))  # linear2 frozen, no adapter
    pm.set_optimizer(opt.SGD(0.1))
    tx, ty = _data()
    pm.compile([tx], is_train=True, use_graph=True, precision="mixed")
    W = m.linear2.W.to_numpy().copy()
    losses = [pm(tx, ty)[1].item() for _ in range(3)]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert m.linear2.W.dtype == np.float32  # the master weight is back after each step
    np.testing.assert_array_equal(m.linear2.W.to_numpy(), W)


def test_set_params_round_trip_of_the_trainable_tensors():
    pm = get_peft_model(_mlp(), LinearLoraConfig(r=2, target_layers=["linear1"]))
    values = {n: np.full(t.shape, 0.5, np.float32) for n, t in pm.get_params().items()}
    pm.set_params(values)
    assert all((t.to_numpy() == 0.5).all() for t in pm.get_params().values())
    with pytest.raises(ValueError, match="missing: linear1.lora_B"):
        pm.set_params({"linear1.lora_A": values["linear1.lora_A"]})
    with pytest.raises(ValueError, match="mismatched: linear1.lora_A"):
        pm.set_params({**values, "linear1.lora_A": np.zeros((3, 3), np.float32)})
