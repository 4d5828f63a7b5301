"""singa-train as a real process: the installed entry point, Ctrl-C (SIGINT) and, in
the slow suite, the default command's accuracy."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import TINY, read_log, run_state


def _command() -> list[str]:
    """The installed ``singa-train`` script (next to this Python), else the module."""
    exe = Path(sys.executable).with_name("singa-train")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("singa-train")
    return [found] if found else [sys.executable, "-m", "singa.cli.main"]


def _env(tmp_path: Path) -> dict:
    env = dict(os.environ)
    env["SINGA_DATA"] = str(tmp_path / "cache")
    env.setdefault("OMP_NUM_THREADS", "2")
    return env


def test_real_process_trains_and_writes_everything(tmp_path):
    cmd = [*_command(), *TINY, "--max-steps", "3", "--checkpoint", "ck.zip", "--log", "run.jsonl"]
    p = subprocess.run(cmd, cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("singa-train: mlp")
    assert "done: 3 steps" in p.stdout
    assert run_state(tmp_path / "ck.zip")["state"]["step"] == 3
    assert [r["event"] for r in read_log(tmp_path / "run.jsonl")] == ["start", "epoch", "end"]


def test_real_process_failure_is_one_line_with_status_1(tmp_path):
    cmd = [*_command(), "cnn", "--data", "mnist", "--data-dir", str(tmp_path), "--no-download"]
    p = subprocess.run(cmd, cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert p.returncode == 1
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: dataset 'mnist' not found"), p.stderr
    p = subprocess.run(
        [*cmd, "--debug"], cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=600
    )
    assert p.returncode == 1 and "Traceback" in p.stderr and "DatasetNotFoundError" in p.stderr


def test_sigint_saves_a_checkpoint_and_exits_130(tmp_path):
    cmd = [
        *_command(),
        *TINY,
        "--epochs",
        "100000",
        "--checkpoint",
        "ck.zip",
        "--log",
        "run.jsonl",
        "--no-plot",
    ]
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        log = tmp_path / "run.jsonl"
        while proc.poll() is None:  # wait for one finished epoch (however long it takes)
            if log.exists() and '"event": "epoch"' in log.read_text():
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before an epoch was logged"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=600)  # a hang guard, not a speed check
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out + err
    assert "checkpoint saved to ck.zip" in err and "Traceback" not in err
    step = run_state(tmp_path / "ck.zip")["state"]["step"]
    assert step >= 32
    last = read_log(tmp_path / "run.jsonl")[-1]
    assert last["event"] == "interrupted" and last["step"] == step


@pytest.mark.slow
def test_default_command_reaches_80_percent(tmp_path):
    """`singa-train` with no arguments: cnn on fashion-mnist-mini, >= 80% validation accuracy."""
    t0 = time.monotonic()
    p = subprocess.run(
        [*_command(), "--log", "run.jsonl", "--no-plot"],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    end = read_log(tmp_path / "run.jsonl")[-1]
    print(f"default command: val accuracy {end['final_val_acc']:.4f} in {time.monotonic() - t0:.1f}s")
    assert end["final_val_acc"] >= 0.80
