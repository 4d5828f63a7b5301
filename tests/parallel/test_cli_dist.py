"""``singa-train --nproc 2``: one set of output from rank 0, the numbers of one
process at the global batch, resume at another number of processes, Ctrl-C, and
a failing rank."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from mpi_helpers import ROOT, TIMEOUT, env_for, needs_mpi, run_mpi  # noqa: E402

pytestmark = needs_mpi

TINY = ["mlp", "--data", "synthetic", "--no-plot"]


def _env(tmp_path) -> dict:
    env = env_for(2)
    env["SINGA_DATA"] = str(tmp_path / "cache")
    return env


def singa_train(tmp_path, *args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "singa.cli.main", *args],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _events(path) -> list[dict]:
    return [json.loads(line) for line in open(path)]


def test_nproc_2_prints_and_writes_once_with_the_numbers_of_the_global_batch(tmp_path):
    r = singa_train(tmp_path, *TINY, "--batch-size", "16", "--epochs", "2", "--nproc", "2",
                    "--checkpoint", "ck.zip", "--log", "two.jsonl")  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    epochs = [ln[:11] for ln in r.stdout.splitlines() if ln.startswith("epoch ")]
    assert epochs == ["epoch 1/2  ", "epoch 2/2  "]
    assert "2 ranks x batch 16 = global batch 32" in r.stdout
    assert r.stdout.count("done:") == 1
    assert sorted(p for p in os.listdir(tmp_path) if p != "cache") == ["ck.zip", "two.jsonl"]
    two = _events(tmp_path / "two.jsonl")
    assert [e["event"] for e in two] == ["start", "epoch", "epoch", "end"]
    one = singa_train(tmp_path, *TINY, "--batch-size", "32", "--epochs", "2", "-q", "--log", "one.jsonl")
    assert one.returncode == 0, one.stderr[-2000:]
    one_ev = _events(tmp_path / "one.jsonl")
    for a, b in zip(two[1:3], one_ev[1:3]):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5, abs=1e-9)
        assert a["val_acc"] == b["val_acc"] and a["step"] == b["step"]


def test_resume_at_another_number_of_processes(tmp_path):
    r = singa_train(tmp_path, *TINY, "--batch-size", "16", "--epochs", "1", "--max-steps", "10",
                    "--nproc", "2", "--checkpoint", "ck.zip")  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    r = singa_train(tmp_path, "--resume", "ck.zip")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "global batch changed from 32 to 16 (2 -> 1 ranks of batch 16)" in r.stderr
    assert "continuing epoch 1 at batch 20 of 64" in r.stderr
    assert "done: 54 steps" in r.stdout


def test_ctrl_c_stops_every_rank_and_rank_0_saves(tmp_path):
    args = [*TINY, "--batch-size", "8", "--epochs", "50", "--nproc", "2", "--checkpoint", "ck.zip"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "singa.cli.main", *args],
        cwd=tmp_path,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        while line and not line.startswith("epoch 1/50"):
            line = proc.stdout.readline()
        assert line, proc.stderr.read()
        proc.send_signal(signal.SIGINT)  # what a terminal's Ctrl-C sends to the launcher
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted at step" in err and err.count("checkpoint saved to ck.zip") == 1
    r = singa_train(tmp_path, "--resume", "ck.zip", "--epochs", "2", "-q")
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_failing_rank_ends_the_cli_job_naming_the_rank(tmp_path):
    """Only rank 0 writes the checkpoint, so only rank 0 finds it cannot."""
    (tmp_path / "a-file").write_text("")
    # the job must end by itself: run_mpi's timeout is a hang guard, not a speed check
    proc = run_mpi(2, ["-m", "singa.cli.main", *TINY, "--checkpoint", str(tmp_path / "a-file" / "ck.zip")],
                   env=_env(tmp_path), cwd=ROOT)  # fmt: skip
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("singa-train: rank")]
    assert len(lines) == 1 and lines[0].startswith("singa-train: rank 0 of 2 failed: "), proc.stderr


def test_sigterm_to_the_launcher_stops_every_rank_at_one_step_rank_0_saves(tmp_path):
    """A scheduler's SIGTERM: the ranks stop at the same step, rank 0 saves that step in
    the --checkpoint-dir, the job exits 143 and --resume auto continues it."""
    args = [*TINY, "--batch-size", "8", "--epochs", "50", "--nproc", "2", "--checkpoint-dir", "ck"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "singa.cli.main", *args, "--log", "run.jsonl"],
        cwd=tmp_path,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        while line and not line.startswith("epoch 1/50"):
            line = proc.stdout.readline()
        assert line, proc.stderr.read()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err[-2000:]
    stopped = [e for e in _events(tmp_path / "run.jsonl") if e["event"] == "interrupted"]
    assert len(stopped) == 1  # rank 0 alone writes
    files = sorted(os.listdir(tmp_path / "ck"))
    assert files[-1] == f"ckpt-{stopped[0]['step']:09d}.zip" and files[0] == "checkpoints.json"
    r = singa_train(tmp_path, *TINY, "--batch-size", "8", "--epochs", "2", "--checkpoint-dir", "ck",
                    "--resume", "auto", "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]


_DIE_ONCE = """
import os
if os.environ.get("SINGA_TEST_DIE_AT"):
    import signal

    from singa.cli import fit_run

    real = fit_run.CliRun.on_train_batch_end

    def on_train_batch_end(self, step, logs=None):
        real(self, step, logs)
        mark = os.environ["SINGA_TEST_MARK"]
        if self.state.step == int(os.environ["SINGA_TEST_DIE_AT"]) and self.trainer.dist.rank == 1:
            if not os.path.exists(mark):
                open(mark, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)

    fit_run.CliRun.on_train_batch_end = on_train_batch_end
"""


def test_max_restarts_continues_a_job_whose_rank_died(tmp_path):
    """Rank 1 of two is killed once, after the step-10 checkpoint; --max-restarts starts
    the job again from it, and the job ends with the parameters of a straight run."""
    args = [*TINY, "--batch-size", "16", "--epochs", "2", "--nproc", "2", "--seed", "4", "-q"]
    r = singa_train(tmp_path, *args, "--checkpoint-dir", "full")
    assert r.returncode == 0, r.stderr[-2000:]
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_DIE_ONCE)  # imported by every rank at start-up
    env = _env(tmp_path)
    env["PYTHONPATH"] = str(hook) + os.pathsep + env["PYTHONPATH"]
    env["SINGA_TEST_DIE_AT"], env["SINGA_TEST_MARK"] = "12", str(tmp_path / "killed")
    cmd = [
        *args,
        "--checkpoint-dir",
        "part",
        "--save-every",
        "5",
        "--max-restarts",
        "2",
        "--log",
        "run.jsonl",
    ]
    r = subprocess.run([sys.executable, "-m", "singa.cli.main", *cmd], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=TIMEOUT)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "killed").exists() and "restart 1/2" in r.stderr
    assert any(e["event"] == "restart" for e in _events(tmp_path / "run.jsonl"))
    from singa import checkpoint

    full, part = checkpoint.newest_valid(tmp_path / "full"), checkpoint.newest_valid(tmp_path / "part")
    assert full[0] == part[0]
    a, b = checkpoint.read_arrays(str(full[1])), checkpoint.read_arrays(str(part[1]))
    assert sorted(a) == sorted(b)
    for k in a:
        assert (a[k] == b[k]).all(), k
