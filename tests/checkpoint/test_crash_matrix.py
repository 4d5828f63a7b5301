"""The crash matrix of CheckpointManager (bench/bench_crash_matrix.py, a few dozen
trials here, hundreds in the bench): a worker saving every step is killed with
SIGKILL at random moments of synchronous and asynchronous saves; every listed
checkpoint reads back whole, the newest valid one resumes bitwise, and the next
save leaves exactly the kept files (no stray temporaries)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))

import bench_crash_matrix  # noqa: E402


@pytest.mark.slow
def test_sigkill_during_sync_and_async_saves(tmp_path):
    r = bench_crash_matrix.run_matrix(24, mb=2.0, max_delay=1.0, seed=1, folder=str(tmp_path))
    assert r["trials"] == 24
    assert r["problems"] == [] and r["failed"] == 0
    assert r["stray_found"] > 0  # the kills did land inside writes
    assert min(r["final_step"].values()) > 12  # each chain made progress over its trials


def test_check_folder_detects_a_wrong_resume(tmp_path):
    """The matrix's own check fails when a checkpoint does not hold its step's states."""
    from singa.checkpoint import CheckpointManager

    m = bench_crash_matrix.build()
    for s in (1, 2, 3):  # states of step 3 saved under the name of step 2
        bench_crash_matrix.train_step(m, s)
    CheckpointManager(tmp_path, keep_last=2).save(2, m, aux_states={"blob": bench_crash_matrix.blob(2, 0.01)})
    step, problems = bench_crash_matrix.check_folder(str(tmp_path), 0.01)
    assert step == 2 and any("differs from the uninterrupted run" in p for p in problems)
