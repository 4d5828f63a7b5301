"""The command line's checkpoint pieces on their own: restarts (torchrun's
--max-restarts), the preemption signals and their exit status, --resume auto's
folder resolution, and verify-resume's comparison."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from singa import checkpoint, model, opt
from singa.cli import preempt, restart
from singa.cli.ckpt_options import resolve_resume, save_due
from singa.cli.errors import CliError
from singa.cli.verify_resume import compare_checkpoints
from singa.layer import Linear
from singa.tensor import Tensor


class _Cfg:
    def __init__(self, **kw):
        self.resume, self.checkpoint_dir, self.checkpoint, self.save_every = None, None, None, None
        self.__dict__.update(kw)


def test_restarts_continue_with_resume_auto_until_success():
    calls, codes = [], iter([1, 137, 0])
    rc = restart.run_with_restarts(
        ["mlp", "--resume", "a.zip", "--max-restarts", "3"], 3, lambda a: (calls.append(a), next(codes))[1]
    )
    assert rc == 0 and len(calls) == 3
    assert calls[1] == ["mlp", "--resume", "auto"] and calls[2] == calls[1]


def test_restarts_stop_at_the_limit_and_after_final_statuses(capsys):
    calls = []
    assert restart.run_with_restarts(["x"], 2, lambda a: (calls.append(a), 1)[1]) == 1
    assert len(calls) == 3 and "giving up" in capsys.readouterr().err
    for final in (0, 2, 130, 143):
        calls.clear()
        assert restart.run_with_restarts(["x"], 5, lambda a, f=final: (calls.append(a), f)[1]) == final
        assert len(calls) == 1


def test_restart_is_recorded_in_the_log(tmp_path):
    log = tmp_path / "run.jsonl"
    codes = iter([1, 0])
    restart.run_with_restarts(["x"], 1, lambda a: next(codes), log_path=str(log))
    assert '"event": "restart"' in log.read_text() and '"exit_status": 1' in log.read_text()


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGUSR1, 143), (signal.SIGINT, 130)])
def test_stop_signals_call_the_handler_and_set_the_status(sig, status):
    seen = []
    before = signal.getsignal(signal.SIGTERM)
    with preempt.StopSignals(lambda s, f: seen.append(s)) as stop:
        os.kill(os.getpid(), sig)
        os.kill(os.getpid(), signal.SIGUSR1)  # a later signal does not change the status
    assert seen == [sig, signal.SIGUSR1] and stop.exit_status == status
    assert signal.getsignal(signal.SIGTERM) is before


def _tiny(seed):
    class M(model.Model):
        def __init__(self):
            super().__init__()
            self.fc = Linear(2)

        def forward(self, x):
            return self.fc(x)

    m = M()
    m.set_optimizer(opt.SGD(0.1))
    m.compile(
        [Tensor(data=np.random.default_rng(seed).standard_normal((2, 3)).astype(np.float32))], is_train=False
    )
    return m


def test_resume_auto_finds_the_newest_valid_checkpoint(tmp_path):
    mgr = checkpoint.CheckpointManager(tmp_path, keep_last=3)
    m = _tiny(0)
    mgr.save(4, m)
    newest = mgr.save(8, m)
    with open(newest, "r+b") as f:
        f.truncate(100)
    warned, said = [], []
    cfg = _Cfg(resume="auto", checkpoint_dir=str(tmp_path))
    resolve_resume(cfg, warned.append, said.append)
    assert cfg.resume == mgr.path(4) and "ckpt-000000008.zip" in warned[0]
    cfg = _Cfg(resume=str(tmp_path))  # --resume DIR also saves there
    resolve_resume(cfg, warned.append, said.append)
    assert cfg.resume == mgr.path(4) and cfg.checkpoint_dir == str(tmp_path)


def test_resume_auto_on_an_empty_folder_starts_afresh(tmp_path):
    said = []
    cfg = _Cfg(resume="auto", checkpoint_dir=str(tmp_path / "none"))
    resolve_resume(cfg, said.append, said.append)
    assert cfg.resume is None and "starting afresh" in said[0]


def test_resume_auto_when_every_checkpoint_is_damaged(tmp_path):
    p = checkpoint.CheckpointManager(tmp_path).save(1, _tiny(0))
    with open(p, "r+b") as f:
        f.truncate(50)
    with pytest.raises(CliError, match="no checkpoint in it reads back whole"):
        resolve_resume(_Cfg(resume="auto", checkpoint_dir=str(tmp_path)), print, print)


def test_save_due_counts_steps():
    cfg = _Cfg(save_every=5)
    assert [s for s in range(0, 16) if save_due(cfg, s)] == [5, 10, 15]
    assert not save_due(_Cfg(), 5)


def test_compare_checkpoints_finds_a_planted_difference(tmp_path):
    a, b = str(tmp_path / "a.zip"), str(tmp_path / "b.zip")
    m = _tiny(0)
    m.save_states(a)
    m.save_states(b)
    n, diffs = compare_checkpoints(a, b)
    assert diffs == [] and n >= 4
    w = m.get_states()["fc.W"]
    arr = w.to_numpy().copy()
    arr.flat[3] = np.nextafter(arr.flat[3], np.float32(np.inf))  # one ulp
    w.copy_from_numpy(arr)
    m.save_states(b)
    n, diffs = compare_checkpoints(a, b)
    assert len(diffs) == 1 and diffs[0].startswith("fc.W:") and "1 values" in diffs[0]
