"""DistOpt and the communicator in one process (no launcher): a job of one rank that
never needs MPI; under a launcher without mpi4py, one clear error. The collectives'
arithmetic checked on the one-rank engine."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from singa.parallel import Communicator, LocalEngine, collectives
from singa.parallel.faults import failure_line
from singa.parallel.launch import join_processes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_process_no_launcher_started_is_a_job_of_one_rank(monkeypatch):
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SINGA_DIST"):
        monkeypatch.delenv(var, raising=False)
    comm = Communicator()
    assert (comm.world_size, comm.global_rank, comm.local_rank) == (1, 0, 0)
    assert isinstance(comm.engine, LocalEngine)
    assert comm.agree(True) and not comm.agree(False)


def test_launched_without_mpi4py_says_how_to_install_it():
    code = (
        "import sys; sys.modules['mpi4py'] = None\n"
        "from singa import opt\n"
        "try:\n    opt.DistOpt(opt.SGD())\nexcept RuntimeError as e:\n    print(e)\n"
    )
    env = {**os.environ, "OMPI_COMM_WORLD_SIZE": "2", "PYTHONPATH": ROOT}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "one of 2 started by an MPI launcher" in r.stdout and "pip install '.[dist]'" in r.stdout


def test_fusion_groups_follow_singas_rule():
    # > threshold alone at once; small ones queued until the queue exceeds threshold
    assert collectives.fusion_groups([5, 20, 3, 4, 2, 1], 6) == [[1], [0, 2], [3, 4, 5]]
    assert collectives.fusion_groups([1, 1], 10) == [[0, 1]]
    assert collectives.fusion_groups([], 10) == []


def test_fused_sum_scales_and_keeps_shapes_and_inputs():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.ones(4, dtype=np.float32)
    out = collectives.fused_sum(LocalEngine(), [a, b], 0.5)
    np.testing.assert_array_equal(out[0], a * 0.5)
    np.testing.assert_array_equal(out[1], b * 0.5)
    assert out[0].shape == (2, 3) and a[1, 2] == 5  # inputs unchanged


def test_half_sum_rounds_through_float16_and_clips():
    g = np.asarray([1.0 + 2**-12, 300.0, -500.0], dtype=np.float32)
    (out,) = collectives.fused_sum_half(LocalEngine(), [g], clip=400.0)
    np.testing.assert_array_equal(out, np.asarray([1.0, 300.0, -400.0], dtype=np.float32))
    with pytest.raises(TypeError, match="float32"):
        collectives.fused_sum_half(LocalEngine(), [g.astype(np.float64)])


@pytest.mark.parametrize("top_k", [True, False])
def test_sparse_sum_sends_the_significant_elements_and_keeps_the_rest(top_k):
    g = np.asarray([0.5, -0.01, 0.02, -0.9, 0.001, 0.3], dtype=np.float32)
    acc = np.zeros(6, dtype=np.float32)
    spars = 0.5 if top_k else 0.25  # top 3 by |g|, or |g| >= 0.25: the same three
    (out,) = collectives.sparse_sum(LocalEngine(), [g], spars, top_k, acc)
    sent = np.asarray([0.5, 0, 0, -0.9, 0, 0.3], dtype=np.float32)
    np.testing.assert_array_equal(out, sent)
    np.testing.assert_array_equal(acc, g - sent)  # error feedback: what was not sent
    (out2,) = collectives.sparse_sum(LocalEngine(), [g], spars, top_k, acc)
    np.testing.assert_array_equal(acc + out2, 2 * g - sent)  # nothing is lost over steps


def test_failure_line_names_the_rank():
    assert failure_line(3, 8, ValueError("bad\nmore")) == "singa: rank 3 of 8 failed: ValueError: bad"


def _exit_with(code: int) -> None:
    sys.exit(code)


def _hang() -> None:
    import time

    time.sleep(600)


def test_one_failing_child_ends_the_others_after_a_bounded_wait():
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_hang), ctx.Process(target=_exit_with, args=(3,))]
    for p in procs:
        p.start()
    try:
        codes = join_processes(procs, grace=5.0, poll=0.1)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
    assert codes == [-15, 3]


def test_children_that_succeed_are_simply_joined():
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_exit_with, args=(0,)) for _ in range(2)]
    for p in procs:
        p.start()
    assert join_processes(procs, poll=0.1) == [0, 0]


def _mixed_run(wrap: bool, graph: bool = False, steps: int = 3):
    from singa import device, opt, tensor, zoo

    dev = device.get_default_device()
    dev.set_rand_seed(0)
    m = zoo.create("mlp", num_classes=4, num_channels=1)
    sgd = opt.SGD(0.1, momentum=0.9)
    m.set_optimizer(opt.DistOpt(sgd) if wrap else sgd)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 4, 4).astype(np.int32)
    m.compile([tensor.from_numpy(x)], is_train=True, use_graph=graph, precision="mixed")
    for j in range(steps):
        xb = x * np.float32(1e30) if j == 1 else x  # step 1 overflows in float16
        m(tensor.from_numpy(xb), tensor.from_numpy(y))
    return m


@pytest.mark.filterwarnings("ignore:.*encountered:RuntimeWarning")  # the forced overflow
@pytest.mark.parametrize("graph", [False, True])
def test_mixed_precision_with_a_one_rank_distopt_equals_the_plain_optimizer(graph):
    plain, dist = _mixed_run(False, graph), _mixed_run(True, graph)
    scaler = dist.optimizer.loss_scaler
    assert scaler is dist.optimizer.opt.loss_scaler and scaler.skipped_steps == 1
    assert scaler.scale == plain.optimizer.loss_scaler.scale == 2.0**15
    for (k, a), b in zip(plain.get_params().items(), dist.get_params().values()):
        np.testing.assert_array_equal(a.to_numpy(), b.to_numpy(), err_msg=k)
    states = dist.optimizer.get_states(dist.get_params())
    assert states["loss_scaler"]["scale"] == 2.0**15 and states["loss_scaler"]["skipped_steps"] == 1


@pytest.mark.parametrize(
    "variant", ["backward_and_update_half", "backward_and_sparse_update", "backward_and_partial_update"]
)
def test_loss_scaling_with_another_dist_variant_is_refused_clearly(variant):
    from singa import tensor

    m = _mixed_run(True, steps=0)
    before = {k: t.to_numpy() for k, t in m.get_params().items()}
    out = m.forward(tensor.from_numpy(np.ones((4, 1, 8, 8), np.float32)))
    loss = m.softmax_cross_entropy(out, tensor.from_numpy(np.zeros(4, np.int32)))
    with pytest.raises(NotImplementedError, match=f"{variant}.*plain"):
        getattr(m.optimizer, variant)(loss)
    assert m.optimizer.steps == 0
    for k, t in m.get_params().items():
        np.testing.assert_array_equal(t.to_numpy(), before[k])
