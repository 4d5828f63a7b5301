"""singa-train with your own model (file.py:Name, module:Name, --model-arg) and
fine-tuning (--init from a checkpoint, ONNX or safetensors file; --freeze)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_helpers import run_state

from singa import checkpoint

MODEL_FILE = """
from singa import layer, model


class TinyNet(model.Model):
    def __init__(self, num_classes, width=8):
        super().__init__()
        self.width = width
        self.features = layer.Linear(width)
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


def make(num_classes, num_channels, width=8):
    return TinyNet(num_classes, width)


def not_a_model(num_classes):
    return "hello"


class NotAModel:
    pass
"""


@pytest.fixture
def table(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(int) + (x[:, 1] > 0.5).astype(int)
    np.savez(tmp_path / "t.npz", x=x, y=y)
    (tmp_path / "nets").mkdir()
    (tmp_path / "nets" / "tiny.py").write_text(MODEL_FILE)
    return tmp_path


ARGS = ["--data", "npz:t.npz", "--batch-size", "16", "--no-plot"]


@pytest.mark.parametrize("spec", ["nets/tiny.py:TinyNet", "nets/tiny.py:make"])
def test_a_model_from_a_file_trains_and_is_rebuilt_from_the_checkpoint(run, table, spec, tmp_path):
    r = run(spec, *ARGS, "--model-arg", "width=12", "--epochs", "4", "--checkpoint", "ck.zip")
    assert r.exit_code == 0, r.output + r.stderr
    st = run_state(tmp_path / "ck.zip")
    assert st["config"]["model"] == f"{tmp_path / 'nets' / 'tiny.py'}:{spec.split(':')[1]}"
    assert st["config"]["model_args"] == ["width=12"]
    assert checkpoint.read(str(tmp_path / "ck.zip")).shapes["features.W"] == (4, 12)
    assert st["state"]["history"][-1]["val_acc"] >= 0.8
    r = run("evaluate", "ck.zip", "--json")
    assert r.exit_code == 0, r.output + r.stderr
    assert json.loads(r.stdout)["accuracy"] == pytest.approx(st["state"]["history"][-1]["val_acc"])
    r = run("export", "ck.zip", "--onnx", "m.onnx")
    assert r.exit_code == 0, r.output + r.stderr
    (tmp_path / "elsewhere").mkdir()
    np.savez(tmp_path / "elsewhere" / "q.npz", x=np.zeros((2, 4), np.float32))
    r = run("predict", "ck.zip", "elsewhere/q.npz", "--json")
    assert r.exit_code == 0, r.output + r.stderr
    assert len(r.stdout.splitlines()) == 2


def test_a_model_from_a_module(run, table, monkeypatch):
    monkeypatch.syspath_prepend(str(table / "nets"))
    r = run("tiny:TinyNet", *ARGS, "--max-steps", "2")
    assert r.exit_code == 0, r.output + r.stderr
    assert "tiny:TinyNet" in r.stdout


@pytest.mark.parametrize(
    "spec,extra,match",
    [
        ("nets/tiny.py:Missing", [], "has no attribute 'Missing'"),
        ("nets/none.py:TinyNet", [], "does not exist"),
        ("no_such_module_x:Net", [], "cannot import no_such_module_x"),
        ("nets/tiny.py:NotAModel", [], "not a singa.model.Model subclass"),
        ("nets/tiny.py:not_a_model", [], "returned a str"),
        ("nets/tiny.py:TinyNet", ["--model-arg", "depth=3"], "unexpected keyword argument 'depth'"),
        ("nets/tiny.py:TinyNet", ["--model-arg", "oops"], "'oops' is not key=value"),
        ("notazoomodel", [], "not in the zoo"),
    ],
)
def test_bad_model_specs_are_usage_errors_naming_them(run, table, spec, extra, match):
    r = run(spec, *ARGS, *extra, "--max-steps", "1")
    assert r.exit_code == 2, r.output + r.stderr
    assert match in r.stderr and "Traceback" not in r.stderr


def _train(run, classes_file, *extra):
    return run("nets/tiny.py:TinyNet", "--data", classes_file, "--batch-size", "16", "--no-plot", *extra)


def test_init_loads_what_matches_and_freeze_keeps_it(run, table, tmp_path):
    r = _train(run, "npz:t.npz", "--epochs", "2", "--checkpoint", "base.zip")
    assert r.exit_code == 0, r.output + r.stderr
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 4)).astype(np.float32)
    np.savez(tmp_path / "two.npz", x=x, y=(x[:, 0] > 0).astype(int))  # 2 classes: a new head
    r = _train(
        run,
        "npz:two.npz",
        "--epochs",
        "1",
        "--init",
        "base.zip",
        "--freeze",
        "features",
        "--checkpoint",
        "ft.zip",
    )
    assert r.exit_code == 0, r.output + r.stderr
    assert "init: loaded 2 of 4 state tensors from base.zip; 2 left as initialised" in r.stdout
    assert "left as initialised: head.W (12, 2)" not in r.stdout  # width 8 here
    assert "left as initialised: head.W (8, 2) (the file's is (8, 3))" in r.stdout
    assert "frozen: 2 of 4 parameter tensors (features)" in r.stdout
    base, ft = (
        checkpoint.read_arrays(str(tmp_path / "base.zip")),
        checkpoint.read_arrays(str(tmp_path / "ft.zip")),
    )
    for name in ("features.W", "features.b"):
        np.testing.assert_array_equal(ft[name], base[name])
    assert not any(k.startswith("optimizer/features") for k in ft)  # no optimizer state
    assert any(k.startswith("optimizer/head") for k in ft)
    r = run("--resume", "ft.zip", "--epochs", "2")  # the freeze is kept on resume
    assert r.exit_code == 0, r.output + r.stderr
    again = checkpoint.read_arrays(str(tmp_path / "ft.zip"))
    np.testing.assert_array_equal(again["features.W"], base["features.W"])
    assert not np.array_equal(again["head.W"], ft["head.W"])


def test_init_from_onnx_and_safetensors(run, table, tmp_path):
    assert (
        _train(
            run, "npz:t.npz", "--epochs", "1", "--checkpoint", "base.zip", "--export-onnx", "m.onnx"
        ).exit_code
        == 0
    )
    base = checkpoint.read_arrays(str(tmp_path / "base.zip"))
    from safetensors.numpy import save_file

    save_file({k: base[k] for k in ("features.W", "features.b", "head.W")}, str(tmp_path / "w.safetensors"))
    for src, loaded in (("m.onnx", 4), ("w.safetensors", 3)):
        r = _train(run, "npz:t.npz", "--max-steps", "1", "--init", src, "--checkpoint", "x.zip", "--lr", "0")
        assert r.exit_code == 0, r.output + r.stderr
        assert f"init: loaded {loaded} of 4 state tensors from {src}" in r.stdout
        got = checkpoint.read_arrays(str(tmp_path / "x.zip"))
        np.testing.assert_array_equal(got["features.W"], base["features.W"])


def test_bad_init_and_freeze(run, table, tmp_path):
    (tmp_path / "junk.onnx").write_bytes(b"not onnx at all")
    r = _train(run, "npz:t.npz", "--max-steps", "1", "--init", "junk.onnx")
    assert r.exit_code == 1 and "--init junk.onnx" in r.stderr
    # a safetensors header over broken content: load_weights's reader and its message
    (tmp_path / "junk.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{broken json}...")
    r = _train(run, "npz:t.npz", "--max-steps", "1", "--init", "junk.safetensors")
    assert r.exit_code == 1 and "is not a valid safetensors file" in r.stderr, r.output + r.stderr
    r = _train(run, "npz:t.npz", "--max-steps", "1", "--freeze", "nothing*")
    assert r.exit_code == 2 and "no parameter matches 'nothing*'" in r.stderr


def test_resume_with_the_same_model_args_given_again_warns_of_nothing(run, table):
    args = ["nets/tiny.py:TinyNet", *ARGS, "--model-arg", "width=5", "--freeze", "head"]
    assert run(*args, "--max-steps", "3", "--checkpoint", "ck.zip").exit_code == 0
    r = run(*args, "--resume", "ck.zip", "--max-steps", "5")
    assert r.exit_code == 0, r.output + r.stderr
    assert "changed settings" not in r.stderr
