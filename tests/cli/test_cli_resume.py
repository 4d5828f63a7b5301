"""--resume continues bitwise (parameters, optimizer slots and the data order), Ctrl-C
saves and exits 130, and the evaluate / export commands."""

from __future__ import annotations

import json
import signal

import numpy as np
import pytest
from cli_helpers import TINY, assert_same_arrays, read_log, run_state

import singa.cli.trainer
from singa import checkpoint, data


def _history(path) -> list[dict]:
    keep = ("epoch", "step", "train_loss", "train_acc", "val_loss", "val_acc", "lr")
    return [{k: r[k] for k in keep} for r in run_state(path)["state"]["history"]]


@pytest.mark.parametrize("stop", [13, 32, 45])
def test_resume_after_max_steps_is_bitwise_an_uninterrupted_run(run, tmp_path, stop):
    """Stopped mid-epoch 1, at the epoch's end, mid-epoch 2: resuming reaches the same
    parameters, momentum slots and metrics as one run."""
    common = [*TINY, "--epochs", "3", "--seed", "7"]
    assert run(*common, "--checkpoint", "full.zip").exit_code == 0
    r = run(*common, "--max-steps", stop, "--checkpoint", "part.zip")
    assert r.exit_code == 0, r.output
    assert run_state(tmp_path / "part.zip")["state"]["step"] == stop
    r = run("--resume", "part.zip")  # everything else comes from the checkpoint
    assert r.exit_code == 0, r.output + r.stderr
    assert f"resumed from part.zip at step {stop}" in r.stdout
    assert r.stderr == ""
    assert assert_same_arrays(tmp_path / "full.zip", tmp_path / "part.zip") == 8  # 4 params + 4 slots
    assert _history(tmp_path / "full.zip") == _history(tmp_path / "part.zip")
    assert run_state(tmp_path / "part.zip")["state"]["step"] == 96


@pytest.mark.slow  # minutes on 2 cores; tests/checkpoint/test_checkpoint_resume.py covers it at the API level
@pytest.mark.parametrize(
    "args",
    [
        ["resnet8", "--optimizer", "adam", "--scheduler", "cosine", "--warmup", "3", "--batch-size", "32"],
        ["alexnet", "--optimizer", "rmsprop", "--batch-size", "8", "--no-graph"],
    ],
)
def test_resume_with_batchnorm_dropout_adam_and_schedules(run, tmp_path, args):
    """BatchNorm running statistics, dropout masks (the device generator), Adam's and
    RMSProp's slots and the schedule's position all survive the interruption."""
    common = [*args, "--data", "synthetic", "--epochs", "2", "--seed", "3"]
    assert run(*common, "--max-steps", "4", "--checkpoint", "full.zip").exit_code == 0
    assert run(*common, "--max-steps", "2", "--checkpoint", "part.zip").exit_code == 0
    r = run("--resume", "part.zip", "--max-steps", "4")
    assert r.exit_code == 0, r.output + r.stderr
    n = assert_same_arrays(tmp_path / "full.zip", tmp_path / "part.zip")
    assert n > 10
    names = checkpoint.read(str(tmp_path / "part.zip")).names
    if args[0] == "resnet8":
        assert "bn1.running_mean" in names


def test_resume_finished_run_trains_more_epochs(run, tmp_path):
    assert run(*TINY, "--epochs", "1", "--checkpoint", "ck.zip").exit_code == 0
    r = run("--resume", "ck.zip")
    assert r.exit_code == 0 and "done: 32 steps, 1 epoch" in r.stdout
    r = run("--resume", "ck.zip", "--epochs", "2", "--log", "l.jsonl")
    assert r.exit_code == 0, r.output
    assert run_state(tmp_path / "ck.zip")["state"]["step"] == 64
    recs = read_log(tmp_path / "l.jsonl")
    assert recs[0]["resumed_from"] == "ck.zip" and recs[0]["step"] == 32


def test_resume_appends_to_the_log(run, tmp_path):
    assert run(*TINY, "--max-steps", "3", "--checkpoint", "ck.zip", "--log", "l.jsonl").exit_code == 0
    assert run("--resume", "ck.zip", "--epochs", "1", "--log", "l.jsonl").exit_code == 0
    events = [r["event"] for r in read_log(tmp_path / "l.jsonl")]
    assert events == ["start", "epoch", "end", "start", "epoch", "end"]


def test_resume_with_a_changed_setting_warns(run):
    assert run(*TINY, "--max-steps", "3", "--checkpoint", "ck.zip").exit_code == 0
    r = run("--resume", "ck.zip", "--lr", "0.01", "--max-steps", "4")
    assert r.exit_code == 0
    assert "resuming with changed settings" in r.stderr and "lr 0.05 -> 0.01" in r.stderr


def _interrupt_at(mp, step: int) -> None:
    """Send SIGINT to this process when the progress bar reports batch ``step``."""
    real = singa.cli.trainer.Progress.update
    count = {"n": 0}

    def update(self, *a, **kw):
        real(self, *a, **kw)
        count["n"] += 1
        if count["n"] == step:
            signal.raise_signal(signal.SIGINT)

    mp.setattr(singa.cli.trainer.Progress, "update", update)


def test_ctrl_c_saves_and_exits_130_then_resumes_bitwise(run, tmp_path, monkeypatch):
    common = [*TINY, "--epochs", "2"]
    handler = signal.getsignal(signal.SIGINT)  # SIG_IGN when the tests run as a background job
    assert run(*common, "--checkpoint", "full.zip").exit_code == 0
    with monkeypatch.context() as mp:
        _interrupt_at(mp, 40)
        r = run(*common, "--checkpoint", "part.zip", "--log", "l.jsonl")
    assert r.exit_code == 130, r.output + r.stderr
    assert "interrupted at step 40; checkpoint saved to part.zip" in r.stderr
    assert "Traceback" not in r.stderr
    assert run_state(tmp_path / "part.zip")["state"]["step"] == 40
    assert read_log(tmp_path / "l.jsonl")[-1]["event"] == "interrupted"
    assert signal.getsignal(signal.SIGINT) is handler  # the trainer put it back
    r = run("--resume", "part.zip")
    assert r.exit_code == 0, r.output
    assert_same_arrays(tmp_path / "full.zip", tmp_path / "part.zip")
    assert _history(tmp_path / "full.zip") == _history(tmp_path / "part.zip")


def test_ctrl_c_without_checkpoint(run, monkeypatch):
    _interrupt_at(monkeypatch, 2)
    r = run(*TINY)
    assert r.exit_code == 130
    assert "nothing saved (no --checkpoint given)" in r.stderr


def test_ctrl_c_during_validation_resumes_at_the_validation(run, tmp_path, monkeypatch):
    import singa.cli.common

    real = singa.cli.common.evaluate

    def evaluate(model, loader, dev, stop=None, max_batches=None):
        signal.raise_signal(signal.SIGINT)
        return real(model, loader, dev, stop, max_batches)

    with monkeypatch.context() as mp:
        mp.setattr(singa.cli.trainer, "evaluate", evaluate)
        r = run(*TINY, "--epochs", "1", "--checkpoint", "ck.zip")
    assert r.exit_code == 130
    st = run_state(tmp_path / "ck.zip")["state"]
    assert (st["epoch"], st["batch"], st["step"], st["history"]) == (0, 32, 32, [])
    r = run("--resume", "ck.zip")
    assert r.exit_code == 0 and "epoch 1/1  train loss" in r.stdout
    assert len(run_state(tmp_path / "ck.zip")["state"]["history"]) == 1


# ----- evaluate and export ---------------------------------------------------------------------------
@pytest.fixture
def trained(run, tmp_path):
    r = run(*TINY, "--epochs", "1", "--checkpoint", "ck.zip", "--log", "l.jsonl", "--no-plot")
    assert r.exit_code == 0, r.output
    return read_log(tmp_path / "l.jsonl")[1]


def test_evaluate_reproduces_the_validation_metrics(run, trained):
    r = run("evaluate", "ck.zip", "--json")
    assert r.exit_code == 0, r.output + r.stderr
    res = json.loads(r.stdout)
    assert (res["model"], res["data"], res["split"], res["samples"]) == ("mlp", "synthetic", "test", 256)
    assert res["accuracy"] == trained["val_acc"]
    assert res["loss"] == pytest.approx(trained["val_loss"], rel=1e-9)
    r = run("evaluate", "ck.zip", "--split", "train", "--batch-size", "100")
    assert r.exit_code == 0 and "mlp on synthetic (train, 1024 samples): loss" in r.stdout


def test_export_writes_a_model_onnxruntime_agrees_with(run, tmp_path, trained):
    ort = pytest.importorskip("onnxruntime")
    r = run("export", "ck.zip", "--onnx", "m.onnx")
    assert r.exit_code == 0, r.output + r.stderr
    assert "exported mlp (Nx1x28x28 input)" in r.stdout
    norm = run_state(tmp_path / "ck.zip")["normalization"]
    ds = data.load("synthetic")
    x = (ds.x_test - np.float32(norm["mean"][0])) / np.float32(norm["std"][0])
    sess = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    (logits,) = sess.run(None, {sess.get_inputs()[0].name: x.astype(np.float32)})
    assert (logits.argmax(1) == ds.y_test).mean() == trained["val_acc"]
