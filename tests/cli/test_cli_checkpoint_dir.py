"""singa-train with a checkpoint folder: --checkpoint-dir/--keep/--save-every through
CheckpointManager, --resume auto (bitwise, an empty folder, a truncated newest file,
another model's folder), SIGTERM/SIGUSR1 stopping like Ctrl-C with exit status 143,
--max-restarts after a killed run, and verify-resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from cli_helpers import TINY, assert_same_arrays, read_log

import singa.cli.output
from singa import checkpoint


def _steps(folder) -> list[int]:
    return [c["step"] for c in json.loads((folder / "checkpoints.json").read_text())["checkpoints"]]


def _signal_at(mp, step: int, sig: int) -> None:
    """Send ``sig`` to this process when the progress bar reports batch ``step``."""
    real = singa.cli.output.Progress.update
    count = {"n": 0}

    def update(self, *a, **kw):
        real(self, *a, **kw)
        count["n"] += 1
        if count["n"] == step:
            signal.raise_signal(sig)

    mp.setattr(singa.cli.output.Progress, "update", update)


def _same_final(a, b) -> None:
    assert_same_arrays(checkpoint.newest_valid(a)[1], checkpoint.newest_valid(b)[1])


def _snapshot(folder) -> dict:
    return {n: (folder / n).read_bytes() for n in sorted(os.listdir(folder))}


def test_save_every_and_keep(run, tmp_path):
    r = run(*TINY, "--epochs", "2", "--checkpoint-dir", "ck", "--save-every", "10", "--keep", "2")
    assert r.exit_code == 0, r.output + r.stderr
    assert _steps(tmp_path / "ck") == [60, 64]  # 32 steps an epoch; saves at 10, 20, 30, 32, ...
    assert sorted(os.listdir(tmp_path / "ck")) == [
        "checkpoints.json",
        "ckpt-000000060.zip",
        "ckpt-000000064.zip",
    ]


def test_keep_best_keeps_the_lowest_validation_loss_of_the_epoch_ends(run, tmp_path):
    # random labels: the MLP overfits and its validation loss rises after a few epochs
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((320, 20)).astype(np.float32), rng.integers(0, 4, 320)
    np.savez(tmp_path / "d.npz", x_train=x[:256], y_train=y[:256], x_test=x[256:], y_test=y[256:])
    args = [
        "--epochs",
        "10",
        "--checkpoint-dir",
        "ck",
        "--keep",
        "1",
        "--keep-best",
        "1",
        "--save-every",
        "3",
    ]
    r = run("mlp", "--data", "npz:d.npz", "--batch-size", "32", *args, "--lr", "0.5", "--log", "l.jsonl")
    assert r.exit_code == 0, r.output + r.stderr
    epochs = [rec for rec in read_log(tmp_path / "l.jsonl") if rec["event"] == "epoch"]
    best = min(epochs, key=lambda rec: (rec["val_loss"], -rec["step"]))["step"]
    assert best < 80  # an earlier epoch was the best: the case this test is about
    assert _steps(tmp_path / "ck") == [best, 80]  # the best and the newest
    r = run(*TINY, "--keep-best", "2")
    assert r.exit_code == 2 and "--keep-best needs --checkpoint-dir" in r.stderr


def test_resume_auto_is_bitwise_and_the_same_command_can_be_resubmitted(run, tmp_path):
    common = [*TINY, "--epochs", "2", "--seed", "3"]
    assert run(*common, "--checkpoint-dir", "full").exit_code == 0
    r = run(*common, "--checkpoint-dir", "part", "--resume", "auto", "--max-steps", "13", "--save-every", "5")
    assert r.exit_code == 0 and "starting afresh" in r.output + r.stderr  # empty folder: a fresh run
    assert _steps(tmp_path / "part") == [5, 10, 13]
    r = run(*common, "--checkpoint-dir", "part", "--resume", "auto")
    assert r.exit_code == 0, r.output + r.stderr
    assert "resumed from" in r.stdout and "ckpt-000000013.zip" in r.stdout
    full = checkpoint.newest_valid(tmp_path / "full")
    part = checkpoint.newest_valid(tmp_path / "part")
    assert full[0] == part[0] == 64
    assert_same_arrays(full[1], part[1])


def test_resume_auto_skips_a_truncated_newest_file(run, tmp_path):
    common = [*TINY, "--epochs", "1", "--checkpoint-dir", "ck"]
    assert run(*common, "--max-steps", "10", "--save-every", "4").exit_code == 0
    newest = tmp_path / "ck" / "ckpt-000000010.zip"
    newest.write_bytes(newest.read_bytes()[:1000])
    r = run(*common, "--resume", "auto")
    assert r.exit_code == 0, r.output + r.stderr
    assert "skipping a damaged checkpoint" in r.stderr and "ckpt-000000008.zip at step 8" in r.stdout


def test_resume_auto_from_another_models_folder_changes_nothing(run, tmp_path):
    assert run(*TINY, "--epochs", "1", "--max-steps", "3", "--checkpoint-dir", "ck").exit_code == 0
    before = _snapshot(tmp_path / "ck")
    r = run("cnn", "--data", "synthetic", "--batch-size", "32", "--checkpoint-dir", "ck", "--resume", "auto")
    assert r.exit_code == 1 and "does not match" in r.stderr
    assert _snapshot(tmp_path / "ck") == before


def test_usage_errors(run):
    r = run(*TINY, "--resume", "auto")
    assert r.exit_code == 2 and "--resume auto needs --checkpoint-dir" in r.stderr
    r = run(*TINY, "--checkpoint-dir", "a", "--checkpoint", "b.zip")
    assert r.exit_code == 2 and "not both" in r.stderr
    r = run(*TINY, "--max-restarts", "2")
    assert r.exit_code == 2 and "--max-restarts needs --checkpoint-dir" in r.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_preemption_signal_saves_and_exits_143_then_resumes_bitwise(run, tmp_path, monkeypatch, sig):
    common = [*TINY, "--epochs", "2", "--seed", "5"]
    assert run(*common, "--checkpoint-dir", "full").exit_code == 0
    handler = signal.getsignal(signal.SIGTERM)
    with monkeypatch.context() as mp:
        _signal_at(mp, 41, sig)
        r = run(*common, "--checkpoint-dir", "part")
    assert r.exit_code == 143, r.output + r.stderr
    assert signal.getsignal(signal.SIGTERM) is handler
    assert checkpoint.newest_valid(tmp_path / "part")[0] == 41  # no step lost
    r = run(*common, "--checkpoint-dir", "part", "--resume", "auto")
    assert r.exit_code == 0, r.output + r.stderr
    _same_final(tmp_path / "full", tmp_path / "part")


def _cli(*args, **kw):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-m", "singa.cli.main", *map(str, args)], env=env, **kw)


@pytest.mark.slow
def test_sigterm_at_random_steps_in_a_real_process(tmp_path):
    """SIGTERM from outside at random moments: exit 143, the step of the interruption
    saved, and the resumed run ends bitwise where the straight one does."""
    import random
    import time

    common = [*TINY, "--epochs", "2", "--seed", "9", "-q"]
    assert _cli(*common, "--checkpoint-dir", tmp_path / "full").returncode == 0
    full = checkpoint.newest_valid(tmp_path / "full")
    rng = random.Random(0)
    for i in range(4):
        d = tmp_path / f"part{i}"
        log = tmp_path / f"part{i}.jsonl"
        p = subprocess.Popen(
            [sys.executable, "-m", "singa.cli.main", *common, "--checkpoint-dir", str(d), "--log", str(log)],
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
        )
        time.sleep(rng.uniform(3.0, 8.0))
        p.send_signal(signal.SIGTERM)
        rc = p.wait(300)
        if rc == 0:  # it had finished already
            continue
        assert rc == 143
        stopped = [json.loads(x) for x in log.read_text().splitlines() if '"interrupted"' in x][-1]["step"]
        assert checkpoint.newest_valid(d)[0] == stopped
        assert _cli(*common, "--checkpoint-dir", d, "--resume", "auto").returncode == 0
        assert_same_arrays(full[1], checkpoint.newest_valid(d)[1])


def test_max_restarts_continues_a_killed_run(tmp_path, monkeypatch):
    """The first attempt dies (SIGKILL of itself after its step-10 save); the restart
    continues from that checkpoint and the job ends like a straight run."""
    monkeypatch.chdir(tmp_path)
    common = [*TINY, "--epochs", "1", "--seed", "2", "-q"]
    assert _cli(*common, "--checkpoint-dir", "full").returncode == 0
    kill_once = tmp_path / "kill_once.py"
    kill_once.write_text(
        "import os, signal, sys\n"
        "from singa.cli import main as m\n"
        "import singa.checkpoint.manager as mg\n"
        "real = mg.CheckpointManager.save\n"
        "def save(self, step, *a, **kw):\n"
        "    out = real(self, step, *a, **kw)\n"
        "    if step == 10 and not os.path.exists('killed'):\n"
        "        open('killed', 'w').close(); os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return out\n"
        "mg.CheckpointManager.save = save\n"
        "m.main()\n"
    )
    from singa.cli import restart

    def launch(args):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        return subprocess.call([sys.executable, str(kill_once), *args], env=env)

    args = [*common, "--checkpoint-dir", "part", "--save-every", "5", "--log", "run.jsonl"]
    rc = restart.run_with_restarts(args, 2, launch, log_path="run.jsonl")
    assert rc == 0 and (tmp_path / "killed").exists()
    assert '"event": "restart"' in (tmp_path / "run.jsonl").read_text()
    _same_final(tmp_path / "full", tmp_path / "part")


def test_verify_resume_says_exact(run):
    r = run("verify-resume", *TINY, "--steps", "12", "--at", "5")
    assert r.exit_code == 0, r.output + r.stderr
    assert "exact: all" in r.stdout


def test_verify_resume_detects_a_planted_difference(run, tmp_path):
    """A model with state that no checkpoint holds (a Python counter scaling its
    output) cannot resume exactly; verify-resume says which entries differ."""
    (tmp_path / "leaky.py").write_text(
        "from singa import autograd, layer, model\n"
        "class Leaky(model.Model):\n"
        "    def __init__(self, num_classes=10, num_channels=1, image_size=28):\n"
        "        super().__init__()\n"
        "        self.fc = layer.Linear(num_classes)\n"
        "        self.calls = 0\n"
        "    def forward(self, x):\n"
        "        self.calls += 1\n"
        "        return autograd.mul(self.fc(autograd.flatten(x)), 1.0 + 0.1 * (self.calls % 3))\n"
        "    def train_one_batch(self, x, y):\n"
        "        out = self.forward(x)\n"
        "        loss = autograd.softmax_cross_entropy(out, y)\n"
        "        self.optimizer(loss)\n"
        "        return out, loss\n"
    )
    r = run(
        "verify-resume",
        str(tmp_path / "leaky.py") + ":Leaky",
        "--data",
        "synthetic",
        "--batch-size",
        "32",
        "--no-graph",
        "--steps",
        "8",
        "--at",
        "4",
    )
    assert r.exit_code == 1, r.output + r.stderr
    assert "NOT exact" in r.stdout and "fc.W" in r.stdout


def test_async_save_resumes_bitwise(run, tmp_path):
    common = [*TINY, "--epochs", "1", "--seed", "4", "--checkpoint-dir"]
    assert run(*common, "full").exit_code == 0
    r = run(*common, "part", "--async-save", "--save-every", "4", "--max-steps", "9")
    assert r.exit_code == 0, r.output + r.stderr
    assert _steps(tmp_path / "part") == [4, 8, 9]  # every background save finished before the exit
    assert run(*common, "part", "--async-save", "--resume", "auto").exit_code == 0
    _same_final(tmp_path / "full", tmp_path / "part")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mlp", "cnn", "resnet8", "alexnet", "vit"])
def test_verify_resume_is_exact_on_the_zoo_models(run, name):
    r = run("verify-resume", name, "--data", "synthetic", "--batch-size", "16", "--steps", "10", "--at", "3")
    assert r.exit_code == 0, r.output + r.stderr
    assert "exact: all" in r.stdout
