"""singa-train's options that come with fit's callbacks: --early-stop, --keep,
--tensorboard, --accumulate, --summary, --time-budget."""

from __future__ import annotations

import os

import numpy as np
import pytest
from cli_helpers import TINY, assert_same_arrays, read_log, run_state

from singa import checkpoint


def test_early_stop_stops_when_val_loss_stops_improving(run, tmp_path):
    # lr 0: the validation loss never changes, so the second epoch does not improve
    r = run(*TINY, "--epochs", "5", "--lr", "0", "--early-stop", "0", "--log", "l.jsonl", "--no-plot")
    assert r.exit_code == 0, r.output + r.stderr
    epochs = [ln for ln in r.stdout.splitlines() if ln.startswith("epoch ")]
    assert [ln.split("  ")[0] for ln in epochs] == ["epoch 1/5", "epoch 2/5"]
    assert "stopped early by --early-stop 0" in r.stdout
    assert read_log(tmp_path / "l.jsonl")[-1]["epochs"] == 2


def test_a_resumed_run_stops_early_at_the_epoch_an_uninterrupted_run_stops_at(run, tmp_path):
    common = [*TINY, "--epochs", "5", "--lr", "0", "--early-stop", "1"]
    r = run(*common)  # epoch 1 sets the best, epoch 2 does not improve: patience 1 is spent
    assert r.exit_code == 0 and "stopped early by --early-stop 1" in r.stdout
    whole = [ln.split("  ")[0] for ln in r.stdout.splitlines() if ln.startswith("epoch ")]
    assert whole == ["epoch 1/5", "epoch 2/5"]
    r = run(*common, "--max-steps", "32", "--checkpoint", "part.zip")  # stops after epoch 1
    assert r.exit_code == 0, r.output + r.stderr
    r = run("--resume", "part.zip")
    assert r.exit_code == 0, r.output + r.stderr
    resumed = [ln.split("  ")[0] for ln in r.stdout.splitlines() if ln.startswith("epoch ")]
    assert resumed == ["epoch 2/5"] and "stopped early by --early-stop 1" in r.stdout


def test_keep_keeps_the_newest_epoch_files(run, tmp_path):
    r = run(*TINY, "--epochs", "3", "--checkpoint", "ck-{epoch}.zip", "--keep", "2")
    assert r.exit_code == 0, r.output + r.stderr
    assert sorted(f for f in os.listdir(tmp_path) if f.endswith(".zip")) == ["ck-2.zip", "ck-3.zip"]
    assert run_state(tmp_path / "ck-3.zip")["state"]["epoch"] == 3
    r = run(*TINY, "--checkpoint", "ck.zip", "--keep", "2")
    assert r.exit_code == 2 and "--keep needs a --checkpoint path with {epoch}" in r.stderr


def test_tensorboard_writes_event_files(run, tmp_path):
    pytest.importorskip("tensorboardX")
    r = run(*TINY, "--epochs", "2", "--tensorboard", "tb")
    assert r.exit_code == 0, r.output + r.stderr
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(tmp_path / "tb"))
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except Exception:
        return
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert {"train/loss", "val/loss", "val/accuracy", "lr"} <= set(acc.Tags()["scalars"])
    assert len(acc.Scalars("val/loss")) == 2


def test_accumulate_equals_the_larger_batch(run, tmp_path):
    a = run(
        "mlp",
        "--data",
        "synthetic",
        "--batch-size",
        "16",
        "--accumulate",
        "2",
        "--epochs",
        "1",
        "--checkpoint",
        "a.zip",
    )
    assert a.exit_code == 0, a.output + a.stderr
    b = run("mlp", "--data", "synthetic", "--batch-size", "32", "--epochs", "1", "--checkpoint", "b.zip")
    assert b.exit_code == 0, b.output + b.stderr
    xa, xb = checkpoint.read_arrays(str(tmp_path / "a.zip")), checkpoint.read_arrays(str(tmp_path / "b.zip"))
    model_keys = [k for k in checkpoint.read(str(tmp_path / "b.zip")).names]
    for k in model_keys:
        np.testing.assert_allclose(xa[k], xb[k], rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("stop", [13, 14])
def test_accumulate_resumes_mid_update_bitwise(run, tmp_path, stop):
    """--accumulate 3 stopped 1 or 2 batches into an update: the checkpoint holds the
    partial sums (and says how many batches they hold), and the resumed run ends with
    the uninterrupted run's bits."""
    common = [*TINY, "--epochs", "2", "--seed", "3", "--accumulate", "3"]
    assert run(*common, "--checkpoint", "full.zip").exit_code == 0
    r = run(*common, "--checkpoint", "part.zip", "--max-steps", str(stop))
    assert r.exit_code == 0, r.output + r.stderr
    saved = checkpoint.read_arrays(str(tmp_path / "part.zip"))
    sums = [k for k in saved if k.startswith("singa_accumulate.")]
    assert sums and all(np.any(saved[k] != 0) for k in sums)
    r = run("--resume", "part.zip")
    assert r.exit_code == 0, r.output + r.stderr
    assert_same_arrays(tmp_path / "full.zip", tmp_path / "part.zip")


def test_accumulate_refuses_mixed_precision(run):
    r = run(*TINY, "--accumulate", "2", "--precision", "mixed")
    assert r.exit_code == 2 and "--accumulate does not work with --precision mixed" in r.stderr


def test_summary_prints_the_table(run):
    r = run(*TINY, "--max-steps", "1", "--summary")
    assert r.exit_code == 0, r.output + r.stderr
    assert "Total params: 79,510" in r.stdout and "Layer (type)" in r.stdout


def test_time_budget(run):
    r = run(*TINY, "--epochs", "2", "--time-budget", "10m")
    assert r.exit_code == 0, r.output + r.stderr
    assert "done: 64 steps, 2 epochs" in r.stdout
    r = run(*TINY, "--epochs", "2", "--time-budget", "0.001", "--checkpoint", "ck.zip")
    assert r.exit_code == 0, r.output + r.stderr
    assert "epoch 1/2 (stopped at step 1)" in r.stdout  # the first step (tracing) outlasts 1 ms
    assert "(stopped by --time-budget)" in r.stdout
    assert run_state("ck.zip")["state"]["step"] == 1
    r = run(*TINY, "--time-budget", "soon")
    assert r.exit_code == 2 and "not a duration" in r.stderr


def test_ema_is_stored_in_checkpoints_and_resumes_bitwise(run, tmp_path):
    common = [*TINY, "--epochs", "2", "--seed", "3", "--ema", "0.9"]
    r = run(*common, "--checkpoint", "full.zip")
    assert r.exit_code == 0, r.output + r.stderr
    arrays = checkpoint.read_arrays(str(tmp_path / "full.zip"))
    ema = sorted(k for k in arrays if "ema/" in k)
    assert len(ema) == 4  # one average per parameter of the MLP (2 weights, 2 biases)
    r = run(*common, "--max-steps", "13", "--checkpoint", "part.zip")  # mid-epoch 1
    assert r.exit_code == 0, r.output + r.stderr
    r = run("--resume", "part.zip")  # --ema comes from the checkpoint
    assert r.exit_code == 0, r.output + r.stderr
    assert assert_same_arrays(tmp_path / "full.zip", tmp_path / "part.zip") == 12  # params, slots, averages
    assert run(*TINY, "--ema", "1.0").exit_code == 2  # decay must be below 1
