"""Adapter-only checkpoints: round trip, size, atomic saving, validation before any
change, the stored configuration, and loading into a fresh base model."""

import os
import zipfile

import numpy as np
import pytest
from peft_helpers import MLP, t32

from singa import device, opt
from singa.checkpoint import CheckpointError
from singa.peft import LinearLoraConfig, PeftModel, get_peft_model


def _peft(seed=0, **cfg):
    device.get_default_device().set_rand_seed(seed)
    m = MLP()
    m.compile([t32(np.zeros((4, 6)))], is_train=False)
    cfg.setdefault("target_layers", ["linear1", "linear2"])
    pm = get_peft_model(m, LinearLoraConfig(r=cfg.pop("r", 2), lora_alpha=cfg.pop("lora_alpha", 4), **cfg))
    rng = np.random.default_rng(seed)
    for t in pm.get_params().values():
        t.copy_from(rng.standard_normal(t.shape).astype(np.float32))
    return pm


def _adapters(pm):
    return {n: t.to_numpy().copy() for n, t in pm.get_params().items()}


def test_round_trip_holds_only_adapters_and_reports_size(tmp_path):
    pm = _peft()
    path = tmp_path / "ad.zip"
    info = pm.save_adapters(path)
    assert info.path == str(path) and info.nbytes == os.path.getsize(path)
    assert info.tensors == 4 and info.values == 2 * 6 + 5 * 2 + 2 * 5 + 3 * 2
    with zipfile.ZipFile(path) as zf:
        with zf.open("tensor_dict.npz") as f, zipfile.ZipFile(f) as npz:
            names = sorted(n[: -len(".npy")] for n in npz.namelist())
    assert names == ["linear1.lora_A", "linear1.lora_B", "linear2.lora_A", "linear2.lora_B"]
    saved = _adapters(pm)
    other = _peft(seed=5)
    other.load_adapters(path)
    for n, v in _adapters(other).items():
        np.testing.assert_array_equal(v, saved[n])


def test_from_adapters_rebuilds_the_adapted_model_on_a_fresh_base(tmp_path):
    pm = _peft(use_rslora=True)
    x = t32(np.random.default_rng(1).standard_normal((3, 6)))
    pm.eval()
    want = pm(x).to_numpy()
    pm.save_adapters(tmp_path / "ad.zip")
    base = MLP()
    base.set_states({n.replace(".base_layer", ""): t for n, t in pm.get_states().items() if "lora" not in n})
    again = PeftModel.from_adapters(base, tmp_path / "ad.zip")
    assert again.peft_config.use_rslora and again.peft_config.lora_alpha == 4
    again.eval()
    np.testing.assert_array_equal(again(x).to_numpy(), want)


def test_mismatched_files_change_nothing(tmp_path):
    pm = _peft()
    pm.save_adapters(tmp_path / "ad.zip")
    for kwargs, match in (
        ({"r": 3}, "r is 2 in the file, 3 in the model"),
        ({"lora_alpha": 8}, "lora_alpha is 4 in the file, 8 in the model"),
        ({"target_layers": ["linear1"]}, "adapted layers"),
    ):
        other = _peft(seed=7, **kwargs)
        before = _adapters(other)
        with pytest.raises(CheckpointError, match=match):
            other.load_adapters(tmp_path / "ad.zip")
        for n, v in _adapters(other).items():
            np.testing.assert_array_equal(v, before[n])


def test_not_an_adapter_file_and_corrupt_files(tmp_path):
    pm = _peft()
    pm.base_model.save_states(str(tmp_path / "full.zip"))
    with pytest.raises(CheckpointError, match="not an adapter file"):
        pm.load_adapters(tmp_path / "full.zip")
    pm.save_adapters(tmp_path / "ad.zip")
    data = (tmp_path / "ad.zip").read_bytes()
    (tmp_path / "cut.zip").write_bytes(data[: len(data) // 2])
    before = _adapters(pm)
    with pytest.raises(CheckpointError):
        pm.load_adapters(tmp_path / "cut.zip")
    with pytest.raises(FileNotFoundError):
        pm.load_adapters(tmp_path / "missing.zip")
    for n, v in _adapters(pm).items():
        np.testing.assert_array_equal(v, before[n])


def test_failed_save_leaves_the_previous_file(tmp_path):
    from singa import layer, model

    class Lazy(model.Model):
        def __init__(self):
            super().__init__()
            self.fc = layer.Linear(3)

        def forward(self, x):
            return self.fc(x)

    path = tmp_path / "ad.zip"
    _peft().save_adapters(path)
    old = path.read_bytes()
    pm = get_peft_model(Lazy(), LinearLoraConfig(target_layers=["fc"]))
    with pytest.raises(RuntimeError, match="do not exist yet"):
        pm.save_adapters(path)  # the adapters are created on the first call
    assert path.read_bytes() == old
    assert sorted(os.listdir(tmp_path)) == ["ad.zip"]


def test_merged_model_refuses_to_load(tmp_path):
    pm = _peft()
    pm.save_adapters(tmp_path / "ad.zip")
    pm.merge_weights(True)
    with pytest.raises(ValueError, match="merged"):
        pm.load_adapters(tmp_path / "ad.zip")


def test_modules_to_save_travel_with_the_adapters(tmp_path):
    pm = _peft(target_layers=["linear1"], modules_to_save=["linear2"])
    pm.set_optimizer(opt.SGD(0.1))
    info = pm.save_adapters(tmp_path / "ad.zip")
    assert info.tensors == 4
    other = _peft(seed=3, target_layers=["linear1"], modules_to_save=["linear2"])
    other.load_adapters(tmp_path / "ad.zip")
    np.testing.assert_array_equal(other.base_model.linear2.W.to_numpy(), pm.base_model.linear2.W.to_numpy())
