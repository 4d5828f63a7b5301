"""singa-train --lora (adapters on a frozen model started with --init), resuming a LoRA
run, and export --merge / --merged / --adapters; the SPEC's parsing."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from cli_helpers import run_state

from singa import checkpoint
from singa.cli.lora import parse_lora_spec, spec_of

MODEL_FILE = """
from singa import layer, model


class TinyNet(model.Model):
    def __init__(self, num_classes):
        super().__init__()
        self.features = layer.Linear(16)
        self.relu = layer.ReLU()
        self.head = layer.Linear(num_classes)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        return self.head(self.relu(self.features(x)))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss
"""


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 6)).astype(np.float32)
    np.savez(tmp_path / "three.npz", x=x, y=(x[:, 0] > 0).astype(int) + (x[:, 1] > 0.5).astype(int))
    np.savez(tmp_path / "two.npz", x=x, y=(x[:, 2] > 0).astype(int))  # another task: a new head
    (tmp_path / "tiny.py").write_text(MODEL_FILE)
    return tmp_path


def _train(run, data, *extra):
    return run("tiny.py:TinyNet", "--data", data, "--batch-size", "16", "--no-plot", *extra)


def test_lora_trains_only_adapters_and_the_new_head(run, files):
    r = _train(run, "npz:three.npz", "--epochs", "2", "--checkpoint", "base.zip")
    assert r.exit_code == 0, r.output + r.stderr
    r = _train(
        run, "npz:two.npz", "--epochs", "2", "--init", "base.zip", "--lora", "r=2,alpha=4,target=features"
    )
    assert r.exit_code == 0, r.output + r.stderr
    assert "lora: adapts features; trains" in r.stdout
    assert "trained in full (left as initialised by --init): head" in r.stdout
    r = _train(
        run, "npz:two.npz", "--epochs", "2", "--init", "base.zip", "--lora", "r=2,alpha=4,target=features",
        "--checkpoint", "lora.zip",
    )  # fmt: skip
    assert r.exit_code == 0, r.output + r.stderr
    st = run_state(files / "lora.zip")
    assert st["config"]["lora"] == "r=2,alpha=4,target=features,save=head"
    base = checkpoint.read_arrays(str(files / "base.zip"))
    ft = checkpoint.read_arrays(str(files / "lora.zip"))
    for name in ("features.W", "features.b"):  # the frozen base weights did not move
        np.testing.assert_array_equal(ft[name.replace(".", ".base_layer.")], base[name])
    assert np.abs(ft["features.lora_B"]).max() > 0
    slots = sorted({k.split("/")[1] for k in ft if k.startswith("optimizer/")})
    assert slots == ["features.lora_A", "features.lora_B", "head.W", "head.b"]  # no slots for frozen weights


def test_resume_evaluate_and_export_merge(run, files):
    r = _train(run, "npz:three.npz", "--epochs", "1", "--checkpoint", "base.zip")
    assert r.exit_code == 0, r.output + r.stderr
    r = _train(
        run, "npz:three.npz", "--epochs", "1", "--init", "base.zip", "--lora", "r=2", "--checkpoint", "lo.zip"
    )
    assert r.exit_code == 0, r.output + r.stderr
    assert run_state(files / "lo.zip")["config"]["lora"] == "r=2,alpha=2"  # every Linear, nothing new
    r = run("--resume", "lo.zip", "--epochs", "2")
    assert r.exit_code == 0, r.output + r.stderr
    before = checkpoint.read_arrays(str(files / "base.zip"))["features.W"]
    np.testing.assert_array_equal(
        checkpoint.read_arrays(str(files / "lo.zip"))["features.base_layer.W"], before
    )
    r = run("evaluate", "lo.zip", "--json")
    assert r.exit_code == 0, r.output + r.stderr
    acc = json.loads(r.stdout)["accuracy"]
    r = run(
        "export", "lo.zip", "--merge", "--onnx", "m.onnx", "--merged", "merged.zip", "--adapters", "ad.zip"
    )
    assert r.exit_code == 0, r.output + r.stderr
    assert "adapters: " in r.stdout and "merged model: merged.zip" in r.stdout
    merged = checkpoint.read(str(files / "merged.zip"))
    assert sorted(merged.names) == ["features.W", "features.b", "head.W", "head.b"]  # a plain model
    assert run_state(files / "merged.zip")["config"]["lora"] is None
    r = run("evaluate", "merged.zip", "--json")
    assert r.exit_code == 0, r.output + r.stderr
    assert json.loads(r.stdout)["accuracy"] == pytest.approx(acc)
    ops = [n.op_type for n in onnx.load(str(files / "m.onnx")).graph.node]
    assert ops == ["Gemm", "Relu", "Gemm"]  # the adapters merged: one product per Linear
    r = run("export", "merged.zip", "--onnx", "plain.onnx")
    assert r.exit_code == 0, r.output + r.stderr
    assert [n.op_type for n in onnx.load(str(files / "plain.onnx")).graph.node] == ops
    ad = checkpoint.read(str(files / "ad.zip"))
    assert sorted(ad.names) == ["features.lora_A", "features.lora_B", "head.lora_A", "head.lora_B"]


def test_export_errors(run, files):
    r = _train(run, "npz:three.npz", "--max-steps", "1", "--checkpoint", "base.zip")
    assert r.exit_code == 0, r.output + r.stderr
    r = run("export", "base.zip", "--merge", "--onnx", "m.onnx")
    assert r.exit_code == 1 and "was not trained with --lora" in r.stderr
    r = run("export", "base.zip", "--merged", "x.zip")
    assert r.exit_code == 2 and "give --merge too" in r.stderr
    r = run("export", "base.zip")
    assert r.exit_code == 2 and "give --onnx PATH" in r.stderr


@pytest.mark.parametrize(
    "spec,match",
    [
        ("r=0", "r must be a positive integer"),
        ("r=x", "r='x' is not an integer"),
        ("rank=4", "'rank=4' is not a LoRA setting"),
        ("dropout=1.5", "lora_dropout must be in"),
        ("r=2,target=nope", "'nope' is not a layer of the model"),
    ],
)
def test_bad_specs_are_usage_errors(run, files, spec, match):
    r = _train(run, "npz:three.npz", "--max-steps", "1", "--lora", spec)
    assert r.exit_code == 2, r.output + r.stderr
    assert match in r.stderr and "Traceback" not in r.stderr


def test_spec_round_trip():
    c = parse_lora_spec("r=4,alpha=8,dropout=0.1,target=*fc*,target=conv1,save=head,rslora")
    assert (c.r, c.lora_alpha, c.lora_dropout, c.use_rslora) == (4, 8, 0.1, True)
    assert c.target_layers == ["*fc*", "conv1"] and c.modules_to_save == ["head"]
    assert parse_lora_spec(spec_of(c)) == c
    assert parse_lora_spec("r=4").lora_alpha == 4  # alpha defaults to r (scaling 1)
