"""singa-train's training command through click's CliRunner: output, --log, --config,
--list, --help, defaults, --export-onnx, plots."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
from cli_helpers import TINY, read_log, run_state

import singa.cli.trainer
from singa import zoo
from singa.cli.config import TrainConfig
from singa.cli.output import Progress


def test_tiny_run_prints_epoch_lines_and_a_summary(run):
    r = run(*TINY, "--epochs", "2", "--checkpoint", "ck.zip")
    assert r.exit_code == 0, r.output + r.stderr
    out = r.stdout.splitlines()
    assert out[0].startswith("singa-train: mlp (79,510 parameters) on synthetic (1024 train / 256 test")
    assert "sgd lr 0.05 momentum 0.9, cosine lr, batch 32, 2 epochs of 32 steps, graph, cpu, seed 0" in out[1]
    epochs = [ln for ln in out if ln.startswith("epoch ")]
    assert len(epochs) == 2
    assert (
        epochs[0].startswith("epoch 1/2  train loss ")
        and "test loss" in epochs[0]
        and "samples/s" in epochs[0]
    )
    assert any(ln.startswith("done: 64 steps, 2 epochs") for ln in out)
    assert any(ln.strip().startswith("checkpoint:") and ln.strip().endswith("ck.zip") for ln in out)
    assert r.stderr == ""


def test_quiet_prints_nothing(run):
    r = run(*TINY, "--max-steps", "2", "-q")
    assert r.exit_code == 0 and r.stdout == "" and r.stderr == ""


def test_verbose_prints_details(run):
    r = run(*TINY, "--max-steps", "2", "-v")
    assert r.exit_code == 0
    assert "normalisation mean" in r.stdout and "model: MLP(" in r.stdout


def test_max_steps_stops_mid_epoch_and_saves_the_position(run, tmp_path):
    r = run(*TINY, "--epochs", "3", "--max-steps", "5", "--checkpoint", "ck.zip")
    assert r.exit_code == 0, r.output
    assert "epoch 1/3 (stopped at step 5)" in r.stdout
    assert "stopped by --max-steps 5" in r.stdout
    st = run_state(tmp_path / "ck.zip")
    assert st["state"]["step"] == 5 and st["state"]["epoch"] == 0 and st["state"]["batch"] == 5
    assert st["steps_per_epoch"] == 32 and st["config"]["model"] == "mlp"


def test_log_is_json_lines_with_every_event(run, tmp_path):
    r = run(*TINY, "--epochs", "2", "--log", "logs/run.jsonl", "--no-plot")
    assert r.exit_code == 0, r.output
    recs = read_log(tmp_path / "logs" / "run.jsonl")
    assert [x["event"] for x in recs] == ["start", "epoch", "epoch", "end"]
    start, e1, e2, end = recs
    assert start["config"]["model"] == "mlp" and start["config"]["batch_size"] == 32
    assert start["dataset"]["sample_shape"] == [1, 28, 28] and start["steps_per_epoch"] == 32
    for i, e in enumerate((e1, e2), 1):
        assert e["epoch"] == i and e["step"] == 32 * i and e["partial"] is False
        for k in ("train_loss", "train_acc", "val_loss", "val_acc", "time_s", "samples_per_s", "lr"):
            assert isinstance(e[k], float) and math.isfinite(e[k]), k
        assert 0 <= e["train_acc"] <= 1 and 0 <= e["val_acc"] <= 1
    assert e2["train_loss"] < e1["train_loss"]
    assert end["steps"] == 64 and end["final_val_acc"] == e2["val_acc"] and end["log"].endswith("run.jsonl")


def test_config_file_sets_options_and_the_command_line_wins(run, tmp_path):
    (tmp_path / "c.toml").write_text(
        'model = "mlp"\ndata = "synthetic"\nbatch-size = 16\noptimizer = "adam"\nepochs = 3\n'
        'max_steps = 4\ngraph = false\nlog = "run.jsonl"\n'
    )
    r = run("--config", "c.toml", "--epochs", "2")
    assert r.exit_code == 0, r.output
    cfg = read_log(tmp_path / "run.jsonl")[0]["config"]
    assert (cfg["model"], cfg["data"], cfg["batch_size"], cfg["optimizer"]) == (
        "mlp",
        "synthetic",
        16,
        "adam",
    )
    assert cfg["epochs"] == 2 and cfg["max_steps"] == 4 and cfg["graph"] is False
    assert "adam lr 0.001, cosine lr, batch 16, 2 epochs of 64 steps, eager" in r.stdout


def test_config_file_in_a_table(run, tmp_path):
    (tmp_path / "c.toml").write_text('[singa-train]\nmodel = "mlp"\ndata = "synthetic"\nmax-steps = 1\n')
    r = run("--config", "c.toml")
    assert r.exit_code == 0, r.output
    assert "mlp" in r.stdout and "synthetic" in r.stdout


@pytest.mark.parametrize(
    ("args", "field", "value"),
    [
        ([], "model", "cnn"),
        ([], "data", "fashion-mnist-mini"),
        ([], "epochs", TrainConfig.epochs),
        ([], "graph", True),
        ([], "scheduler", "cosine"),
        (["--no-graph"], "graph", False),
        (["resnet8", "--optimizer", "ADAMW"], "optimizer", "adamw"),
    ],
)
def test_settings_reach_the_trainer(run, monkeypatch, args, field, value):
    seen = {}

    def fake_run(self):
        seen["cfg"] = self.cfg
        return {}

    monkeypatch.setattr(singa.cli.trainer.Trainer, "run", fake_run)
    r = run(*args)
    assert r.exit_code == 0, r.output
    assert getattr(seen["cfg"], field) == value


def test_optimizer_defaults():
    cfg = TrainConfig(optimizer="adamw")
    assert (cfg.effective_lr, cfg.effective_momentum, cfg.effective_weight_decay) == (0.001, 0.0, 0.01)
    cfg = TrainConfig(optimizer="sgd", lr=0.2, weight_decay=1e-4)
    assert (cfg.effective_lr, cfg.effective_momentum, cfg.effective_weight_decay) == (0.2, 0.9, 1e-4)


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw", "rmsprop", "adagrad"])
@pytest.mark.parametrize("scheduler", ["constant", "cosine"])
def test_every_optimizer_trains(run, tmp_path, optimizer, scheduler):
    r = run(
        *TINY,
        "--optimizer",
        optimizer,
        "--scheduler",
        scheduler,
        "--warmup",
        "2",
        "--max-steps",
        "3",
        "--log",
        "l.jsonl",
    )
    assert r.exit_code == 0, r.output
    ep = [x for x in read_log(tmp_path / "l.jsonl") if x["event"] == "epoch"][0]
    assert math.isfinite(ep["train_loss"]) and ep["step"] == 3


def test_schedules_change_the_learning_rate(run, tmp_path):
    r = run(*TINY, "--epochs", "2", "--scheduler", "cosine", "--log", "l.jsonl", "--no-plot")
    assert r.exit_code == 0, r.output
    lrs = [x["lr"] for x in read_log(tmp_path / "l.jsonl") if x["event"] == "epoch"]
    assert lrs[0] < 0.05 and lrs[1] == pytest.approx(0.0, abs=1e-9)


def test_list_shows_models_and_datasets(run):
    r = run("--list")
    assert r.exit_code == 0
    for name in zoo.names():
        assert f"  {name} " in r.stdout
    for name in ("fashion-mnist-mini", "fashion-mnist", "mnist", "cifar10", "synthetic"):
        assert f"  {name} " in r.stdout


def test_help(run):
    r = run("--help")
    assert r.exit_code == 0
    assert r.stdout.startswith("Usage: singa-train [MODEL] [OPTIONS]")
    for opt in ("--data-dir", "--max-steps", "--resume", "--export-onnx", "--config", "--graph / --no-graph"):
        assert opt in r.stdout
    for sub in ("evaluate", "export"):
        r = run(sub, "--help")
        assert r.exit_code == 0 and "CHECKPOINT" in r.stdout


def test_export_onnx_after_training(run, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    r = run(*TINY, "--max-steps", "3", "--export-onnx", "out/m.onnx")
    assert r.exit_code == 0, r.output
    assert "ONNX model:" in r.stdout
    sess = ort.InferenceSession(str(tmp_path / "out" / "m.onnx"), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {sess.get_inputs()[0].name: np.zeros((3, 1, 28, 28), np.float32)})
    assert y.shape == (3, 10)


def test_plot_next_to_the_log(run, tmp_path):
    pytest.importorskip("matplotlib")
    r = run(*TINY, "--epochs", "2", "--log", "run.jsonl")
    assert r.exit_code == 0, r.output
    png = (tmp_path / "run.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert "plot:" in r.stdout


def test_plot_without_matplotlib_is_a_warning(run, tmp_path, monkeypatch):
    monkeypatch.setattr(singa.cli.trainer, "matplotlib_available", lambda: False)
    r = run(*TINY, "--max-steps", "2", "--plot", "p.png")
    assert r.exit_code == 0
    assert "matplotlib is not installed" in r.stderr
    assert not (tmp_path / "p.png").exists()
    r = run(*TINY, "--max-steps", "2", "--log", "l.jsonl")  # default plot: silently skipped
    assert r.exit_code == 0 and r.stderr == ""


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_on_a_terminal_shows_running_metrics():
    stream = _Tty()
    bar = Progress(total=4, initial=1, desc="epoch 2/3", enabled=True, stream=stream)
    bar.bar.mininterval = 0
    for _ in range(3):
        bar.update(0.5, 0.25, 64)
    bar.close()
    text = stream.getvalue()
    assert "epoch 2/3" in text and "4/4" in text
    assert "loss=0.5000" in text and "acc=25.00%" in text and "samples/s=" in text
    assert text.index("loss=") < text.index("acc=") < text.index("samples/s=")


def test_no_progress_bar_off_a_terminal_or_when_quiet():
    stream = io.StringIO()
    Progress(total=4, initial=0, desc="x", enabled=True, stream=stream).close()
    quiet = _Tty()
    Progress(total=4, initial=0, desc="x", enabled=False, stream=quiet).close()
    assert stream.getvalue() == "" and quiet.getvalue() == ""


def test_one_step_summary_says_one_step_and_no_zero_rate(run):
    r = run(*TINY, "--max-steps", "1")
    assert r.exit_code == 0, r.output
    assert "done: 1 step, 0 epochs (stopped by --max-steps 1)" in r.stdout
    assert "1 steps" not in r.stdout and " 0 samples/s" not in r.stdout


def test_epoch_line_never_shows_a_zero_rate():
    from singa.cli.output import format_epoch

    rec = {"epoch": 1, "step": 0, "train_loss": None, "val_loss": 1.0, "val_acc": 0.5, "time_s": 0.0}
    assert "samples/s" not in format_epoch({**rec, "samples_per_s": 0.0}, 1)
    assert "1,234 samples/s" in format_epoch({**rec, "samples_per_s": 1234.0}, 1)


@pytest.mark.parametrize(
    ("max_steps", "val_steps", "expected"), [(None, None, None), (4, None, 3), (64, None, None), (4, 7, 7)]
)
def test_validation_follows_max_steps_or_val_steps(max_steps, val_steps, expected):
    """With --max-steps the validation covers the same fraction of its set as the
    training did of an epoch (at least one batch); --val-steps sets it."""
    from singa.cli.guards import val_batches

    assert val_batches(TrainConfig(max_steps=max_steps, val_steps=val_steps), 32, 20) == expected


def test_val_steps_option_reaches_the_evaluation(run, monkeypatch):
    seen = []
    real = singa.cli.trainer.evaluate

    def evaluate(model, loader, dev, stop=None, max_batches=None):
        seen.append(max_batches)
        return real(model, loader, dev, stop, max_batches)

    monkeypatch.setattr(singa.cli.trainer, "evaluate", evaluate)
    assert run(*TINY, "--max-steps", "2", "--val-steps", "1").exit_code == 0
    assert seen == [1]
