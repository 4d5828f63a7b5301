"""Two MPI ranks against one process: same numbers, identical ranks, every
distributed variant trains, graph replay equals eager, failures end the job."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import dist_worker as worker  # noqa: E402
from mpi_helpers import needs_mpi, run_mpi  # noqa: E402

pytestmark = needs_mpi

WORKER = os.path.join(os.path.dirname(__file__), "dist_worker.py")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Every case of the worker, trained by 2 ranks: ``ranks[case][rank]`` is a dict."""
    out = tmp_path_factory.mktemp("ranks")
    proc = run_mpi(2, [WORKER, str(out)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = [*worker.CASES, *worker.MIXED_CASES]
    return {name: [dict(np.load(out / f"{name}_rank{r}.npz")) for r in range(2)] for name in names}


def _params(res: dict) -> dict:
    return {k: v for k, v in res.items() if k.startswith("param/")}


@pytest.mark.parametrize("case", ["sgd_eager", "sgd_graph", "adam_eager", "adam_graph", "sgd_seeded"])
def test_two_ranks_match_one_process_at_twice_the_batch(ranks, case):
    kind, option, _ = worker.CASES[case]
    ref = _params(worker.train(kind, option, False, distributed=False))
    got = _params(ranks[case][0])
    assert got.keys() == ref.keys()
    for k in ref:
        scale = float(np.abs(ref[k]).max())  # elements near 0 are compared at the tensor's scale
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-6 * scale, err_msg=k)


@pytest.mark.parametrize("case", [*worker.CASES, *worker.MIXED_CASES])
def test_ranks_end_bitwise_identical(ranks, case):
    a, b = (_params(r) for r in ranks[case])
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert ranks[case][0]["world"] == 2 and ranks[case][1]["rank"] == 1


@pytest.mark.parametrize(
    "variant", ["sgd", "adam", "half", "partial", "topk", "threshold", "mixed", "mixed_overflow"]
)
def test_graph_replay_equals_eager(ranks, variant):
    eager, graph = _params(ranks[f"{variant}_eager"][0]), _params(ranks[f"{variant}_graph"][0])
    for k in eager:
        np.testing.assert_array_equal(eager[k], graph[k], err_msg=k)


@pytest.mark.parametrize("case", list(worker.CASES))
def test_every_variant_trains(ranks, case):
    res = ranks[case][0]
    assert res["loss_after"] < res["loss_before"] - 0.05, (res["loss_before"], res["loss_after"])


def test_half_precision_transfer_stays_close_to_float32(ranks):
    half, full = ranks["half_eager"][0], ranks["sgd_eager"][0]
    assert abs(float(half["loss_after"]) - float(full["loss_after"])) < 1e-2
    assert not np.array_equal(half["param/conv1.W"], full["param/conv1.W"])  # float16 did travel


def test_sparsification_sends_less_and_still_trains(ranks):
    topk, full = ranks["topk_eager"][0], ranks["sgd_eager"][0]
    assert not np.array_equal(topk["param/linear1.W"], full["param/linear1.W"])


@pytest.mark.parametrize("how", ["raise", "kill"])
def test_one_failing_rank_ends_the_whole_job(how):
    # the job must end by itself (a hang raises TimeoutExpired: the timeout is a hang guard)
    proc = run_mpi(2, [WORKER, "--fail", how])
    assert proc.returncode != 0
    if how == "raise":
        # (Open MPI may leave a NUL byte in front of a line of another rank's stderr)
        lines = [ln.lstrip("\0") for ln in proc.stderr.splitlines()]
        lines = [ln for ln in lines if ln.startswith("singa: rank")]
        assert lines == ["singa: rank 1 of 2 failed: RuntimeError: rank one fails on purpose"], proc.stderr
    else:
        assert "rank 1" in proc.stderr and "signal 9" in proc.stderr.replace("\n", " "), proc.stderr


def test_singas_train_mpi_usage_runs():
    """examples/parallel/train_mpi.py with SINGA's flags (-d, -s, -b, -m)."""
    script = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "parallel", "train_mpi.py")
    args = [script, "mlp", "fashion-mnist-mini", "-d", "sparseThreshold", "-s", "0.01", "-b", "16", "-m", "1"]
    proc = run_mpi(2, [*args, "--max-steps", "4"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "2 ranks x batch 16, sparseThreshold" in proc.stdout
    assert proc.stdout.count("epoch 1:") == 1  # rank 0 prints


def test_ranks_start_from_rank_0s_parameters(ranks):
    """Rank 1 was initialised from another seed; compile gave it rank 0's parameters
    (and the ranks end equal to one process, above)."""
    r0, r1 = ranks["sgd_seeded"]
    assert r0["init_sum"] == r1["init_sum"] == ranks["sgd_eager"][0]["init_sum"]


@pytest.mark.parametrize("case", ["mixed_eager", "mixed_graph"])
def test_mixed_precision_trains_with_loss_scaling(ranks, case):
    for res, float32 in zip(ranks[case], ranks["sgd_eager"]):  # the same run in float32
        assert float(res["loss_after"]) < float(res["loss_before"]) - 0.05
        assert abs(float(res["loss_after"]) - float(float32["loss_after"])) < 0.01
        np.testing.assert_allclose(res["losses"], float32["losses"], atol=1e-3)
    assert [float(r["scale"]) for r in ranks[case]] == [2.0**16] * 2
    assert [int(r["skipped_steps"]) for r in ranks[case]] == [0, 0]


@pytest.mark.parametrize("case", ["mixed_overflow_eager", "mixed_overflow_graph"])
def test_an_overflow_on_one_rank_makes_every_rank_skip(ranks, case):
    """Rank 1's batch overflows at one step; rank 0's was fine, yet both skip that step
    and halve the scale, and end with the same parameters."""
    step = worker.OVERFLOW_STEP
    rank0, rank1 = ranks[case]
    assert np.isfinite(rank0["losses"]).all()
    assert not np.isfinite(rank1["losses"][step])
    assert np.isfinite(np.delete(rank1["losses"], step)).all()
    for res in (rank0, rank1):
        assert int(res["skipped_steps"]) == 1
        assert float(res["scale"]) == 2.0**15
        assert float(res["loss_after"]) < float(res["loss_before"])
    clean = _params(ranks[case.replace("_overflow", "")][0])
    skipped = _params(rank0)
    assert any(not np.array_equal(clean[k], skipped[k]) for k in clean)  # the step was not taken
