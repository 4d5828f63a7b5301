"""singa.kernels.workers: pieces, their order, errors and the worker count."""

import os
import threading

import numpy as np
import pytest

from singa.kernels import workers


def test_even_pieces_cover_the_range_in_order():
    assert workers.even_pieces(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert workers.even_pieces(2, 4) == [(0, 1), (1, 2)]
    assert workers.even_pieces(5, 1) == [(0, 5)]


def test_results_come_back_in_piece_order(monkeypatch):
    monkeypatch.setattr(workers, "_count", [2])
    seen = set()

    def piece(i0, i1):
        seen.add(threading.current_thread().name)
        return np.arange(i0, i1).sum()

    out = workers.run_pieces(piece, workers.even_pieces(1000, 7))
    assert out == [np.arange(a, b).sum() for a, b in workers.even_pieces(1000, 7)]
    assert seen <= {threading.current_thread().name} | {f"singa-worker_{i}" for i in range(4)}


def test_one_worker_runs_inline(monkeypatch):
    monkeypatch.setattr(workers, "_count", [1])
    names = workers.run_pieces(lambda i: threading.current_thread().name, [(0,), (1,)])
    assert names == [threading.current_thread().name] * 2


def test_an_error_in_a_piece_is_raised_after_all_pieces_ran(monkeypatch):
    monkeypatch.setattr(workers, "_count", [2])
    done = []

    def piece(i):
        done.append(i)
        if i == 1:
            raise KeyError("piece 1")

    with pytest.raises(KeyError, match="piece 1"):
        workers.run_pieces(piece, [(0,), (1,), (2,)])
    assert sorted(done) == [0, 1, 2]


def test_sums_of_partials_do_not_depend_on_the_worker_count(monkeypatch):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 300)), rng.standard_normal((300, 16))
    pieces = workers.even_pieces(300, 5)

    def partial(k0, k1):
        return a[:, k0:k1] @ b[k0:k1]

    sums = []
    for n in (1, 2):
        monkeypatch.setattr(workers, "_count", [n])
        parts = workers.run_pieces(partial, pieces)
        total = parts[0].copy()
        for p in parts[1:]:
            total += p
        sums.append(total)
    assert np.array_equal(sums[0], sums[1])


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_a_bad_thread_count_in_the_environment_is_named(monkeypatch, value):
    monkeypatch.setattr(workers, "_count", [])
    monkeypatch.setenv("SINGA_NUM_THREADS", value)
    with pytest.raises(ValueError, match="SINGA_NUM_THREADS"):
        workers.worker_count()


def test_the_environment_sets_the_worker_count(monkeypatch):
    monkeypatch.setattr(workers, "_count", [])
    monkeypatch.setenv("SINGA_NUM_THREADS", "1")
    assert workers.worker_count() == 1


@pytest.mark.parametrize("layout", ["same", "transposed", "strided_out"])
def test_run_flat_pieces_follow_the_outputs_memory_order(monkeypatch, layout):
    monkeypatch.setattr(workers, "PIECE_WORK", 8)  # many pieces
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 3, 5))
    b = np.ascontiguousarray(a.transpose(2, 0, 1)).transpose(1, 2, 0) if layout == "transposed" else a.copy()
    full = np.zeros((4, 3, 10))
    out = full[:, :, ::2] if layout == "strided_out" else np.empty_like(a)
    seen = []

    def kernel(x, y, o):
        seen.append(len(o))
        np.multiply(x, 2.0, out=o)
        o += y

    for count in (1, 2):
        monkeypatch.setattr(workers, "_count", [count])
        seen.clear()
        workers.run_flat(kernel, out, a, b)
        np.testing.assert_array_equal(out, 2.0 * a + b)
        assert len(seen) == workers.MAX_PIECES and sum(seen) == a.size
    if layout == "strided_out":
        assert np.array_equal(full[:, :, ::2], 2.0 * a + b) and not full[:, :, 1::2].any()


def test_run_flat_gives_an_in_place_kernel_the_values_of_a_strided_out(monkeypatch):
    """A kernel that reads ``out`` (an in-place one, no other input) sees out's values
    also when out is not dense and is computed through a dense copy."""
    monkeypatch.setattr(workers, "PIECE_WORK", 8)
    full = np.arange(120, dtype=np.float64).reshape(4, 3, 10) - 60
    out = full[:, :, ::2]
    want = np.maximum(out, 0)

    def relu_in_place(o):
        np.maximum(o, 0, out=o)

    workers.run_flat(relu_in_place, out)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(full[:, :, 1::2], np.arange(120.0).reshape(4, 3, 10)[:, :, 1::2] - 60)


def test_two_workers_run_two_pieces_at_the_same_time(monkeypatch):
    monkeypatch.setattr(workers, "_count", [2])
    both_here = threading.Barrier(2, timeout=30)  # broken unless two pieces meet

    def piece(i):
        both_here.wait()
        return threading.current_thread().name

    names = workers.run_pieces(piece, [(0,), (1,)])
    assert len(set(names)) == 2


def test_the_worker_count_read_inside_a_blas_limit_is_blas_own_setting(monkeypatch):
    from singa.kernels import blas_threads

    ctl = blas_threads.controller()
    if ctl is None or (ctl.get_num_threads() or 1) < 2:
        pytest.skip("needs a controllable BLAS on two or more threads")
    monkeypatch.delenv("SINGA_NUM_THREADS", raising=False)
    monkeypatch.setattr(workers, "_count", [])
    configured = min(ctl.get_num_threads(), workers._cores())
    with blas_threads.limit(1):
        assert ctl.get_num_threads() == 1
        assert workers.worker_count() == configured


def test_a_model_call_holds_blas_on_one_thread_whatever_the_worker_count(monkeypatch):
    """One BLAS thread with two workers (they split the work) and with one (OpenBLAS's
    bits can depend on its thread count: one worker and two must agree)."""
    from singa import layer, model, tensor
    from singa.kernels import blas_threads

    ctl = blas_threads.controller()
    if ctl is None or (ctl.get_num_threads() or 1) < 2:
        pytest.skip("needs a controllable BLAS on two or more threads")
    seen = []

    class Probe(model.Model):
        def __init__(self):
            super().__init__()
            self.fc = layer.Linear(3)

        def forward(self, x):
            seen.append(ctl.get_num_threads())
            return self.fc(x)

    m = Probe()
    m.eval()
    x = tensor.from_numpy(np.ones((2, 4), np.float32))
    before = ctl.get_num_threads()
    for count in (2, 1):
        monkeypatch.setattr(workers, "_count", [count])
        m(x)
        assert seen[-1] == 1
    assert ctl.get_num_threads() == before


def test_run_flat_runs_a_small_kernel_inline_and_splits_a_large_one(monkeypatch):
    """Below PIECE_WORK elements the kernel is called once, in this thread, without the
    pool; at or above it the pieces go through run_pieces."""
    monkeypatch.setattr(workers, "_count", [2])
    pooled, calls = [], []
    real = workers.run_pieces

    def counted(fn, pieces):
        pooled.append(len(pieces))
        return real(fn, pieces)

    monkeypatch.setattr(workers, "run_pieces", counted)

    def double(a, out):
        calls.append((threading.current_thread().name, a.size))
        np.multiply(a, 2, out=out)

    small = np.arange(12.0).reshape(3, 4)
    out = np.empty_like(small)
    workers.run_flat(double, out, small)
    np.testing.assert_array_equal(out, small * 2)
    assert pooled == [] and calls == [(threading.current_thread().name, 12)]
    big = np.ones(workers.PIECE_WORK, dtype=np.float32)
    out = np.empty_like(big)
    workers.run_flat(double, out, big)
    np.testing.assert_array_equal(out, 2)
    assert pooled == [2]


def test_set_worker_count_changes_the_threads_and_none_reads_the_setting_again(monkeypatch):
    if workers._cores() < 2:
        pytest.skip("needs two cores")
    monkeypatch.setattr(workers, "_count", [])
    monkeypatch.setenv("SINGA_NUM_THREADS", "2")
    here = threading.current_thread().name

    def names(meet):
        gate = threading.Barrier(2, timeout=30)  # two pieces meet only on two threads

        def piece(i):
            if meet:
                gate.wait()
            return threading.current_thread().name

        return set(workers.run_pieces(piece, [(0,), (1,)]))

    try:
        workers.set_worker_count(1)
        assert workers.worker_count() == 1 and names(False) == {here}
        workers.set_worker_count(None)
        assert workers.worker_count() == 2 and len(names(True)) == 2
        for bad in (0, -2, 1.5, True, "2"):
            with pytest.raises(ValueError, match="set_worker_count"):
                workers.set_worker_count(bad)
        assert workers.worker_count() == 2  # a refused value changes nothing
    finally:
        workers.set_worker_count(None)


def _needs_two_cpus_and_affinity():
    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs sched_setaffinity and two CPUs")


def test_pool_threads_are_pinned_and_the_caller_keeps_off_their_cpus(monkeypatch):
    from singa.kernels import blas_threads

    _needs_two_cpus_and_affinity()
    if blas_threads.controller() is None:
        pytest.skip("needs a BLAS that threadpoolctl controls")
    cpus = sorted(os.sched_getaffinity(0))
    monkeypatch.setattr(workers, "_others_busy", lambda: False)  # an idle machine
    monkeypatch.setattr(workers, "_count", [])
    monkeypatch.setenv("SINGA_NUM_THREADS", str(len(cpus)))
    workers.set_worker_count(None)  # a fresh pool, one thread per CPU but the caller's
    here = threading.current_thread().name
    meet = threading.Barrier(2, timeout=30)  # each thread takes one piece

    def piece(i):
        meet.wait()
        return threading.current_thread().name, os.sched_getaffinity(0)

    try:
        before = os.sched_getaffinity(0)
        seen = dict(workers.run_pieces(piece, [(0,), (1,)]))
        after = os.sched_getaffinity(0)
    finally:
        monkeypatch.undo()
        workers.set_worker_count(None)  # the pool and count of the real settings
    assert seen.pop(here) == {cpus[0]}
    ((name, pool_cpus),) = seen.items()
    assert name.startswith("singa-worker") and len(pool_cpus) == 1 and pool_cpus <= set(cpus[1:])
    assert after == before  # the caller's own mask is put back


def test_threads_are_pinned_only_when_the_workers_use_every_cpu_and_blas_is_held(monkeypatch):
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("needs sched_setaffinity")
    from singa.kernels import blas_threads

    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda pid: {4, 5, 6})
    monkeypatch.setattr(blas_threads, "controller", lambda: object())
    assert workers._placement(3) == ([5, 6], frozenset({4}))
    assert workers._placement(2) is None  # the other CPU is left to other processes
    assert workers._placement(1) is None
    monkeypatch.setattr(blas_threads, "controller", lambda: None)
    assert workers._placement(3) is None  # BLAS's own threads would share the CPUs


def test_a_caller_mask_without_the_callers_cpus_is_left_alone(monkeypatch):
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("needs sched_setaffinity")
    calls = []
    monkeypatch.setattr(workers.os, "sched_setaffinity", lambda pid, cpus: calls.append(cpus))
    monkeypatch.setattr(workers, "_caller_cpus", [frozenset({10**6})])
    with workers._off_pool_cpus():
        pass
    assert calls == []


def test_a_refused_pin_leaves_the_caller_where_it_is(monkeypatch):
    _needs_two_cpus_and_affinity()
    cpus = sorted(os.sched_getaffinity(0))

    def refuse(pid, mask):
        raise OSError("not allowed here")

    monkeypatch.setattr(workers.os, "sched_setaffinity", refuse)
    monkeypatch.setattr(workers, "_caller_cpus", [frozenset(cpus[:1])])
    with workers._off_pool_cpus():
        inside = os.sched_getaffinity(0)
    assert inside == set(cpus)
    workers._pin_to_next(iter([cpus[0]]))  # a pool thread stays unpinned: no error


def test_a_call_made_while_the_pool_serves_another_runs_inline_without_waiting(monkeypatch):
    monkeypatch.setattr(workers, "_count", [2])
    release, finished, inside = threading.Event(), [], threading.Event()

    def blocker(i):
        inside.set()
        release.wait(timeout=60)
        finished.append(i)

    other = threading.Thread(target=workers.run_pieces, args=(blocker, [(0,), (1,)]))
    other.start()  # another thread's call holds the pool (and its pool thread)
    try:
        assert inside.wait(timeout=30)
        names = workers.run_pieces(lambda i: threading.current_thread().name, [(0,), (1,), (2,)])
        assert names == [threading.current_thread().name] * 3  # the caller took every piece
        assert finished == []  # and came back while the pool was still busy
    finally:
        release.set()
        other.join(timeout=60)
    assert sorted(finished) == [0, 1]


def test_a_piece_that_splits_again_runs_its_pieces_inline(monkeypatch):
    monkeypatch.setattr(workers, "_count", [2])

    def outer(i):
        inner = workers.run_pieces(lambda j: (threading.current_thread().name, j), [(0,), (1,)])
        return threading.current_thread().name, inner

    for name, inner in workers.run_pieces(outer, [(0,), (1,), (2,), (3,)]):
        assert inner == [(name, 0), (name, 1)]  # on the thread that ran the outer piece


def test_the_caller_is_moved_only_while_the_machine_is_not_busy_and_the_load_is_read_once_a_second(
    monkeypatch,
):
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("needs sched_setaffinity")
    moves, readings, load = [], [], [0.5]

    def loadavg():
        readings.append(load[0])
        return (load[0], 0.0, 0.0)

    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(workers.os, "sched_setaffinity", lambda pid, cpus: moves.append(set(cpus)))
    monkeypatch.setattr(workers.os, "getloadavg", loadavg)
    monkeypatch.setattr(workers, "_count", [2])
    monkeypatch.setattr(workers, "_caller_cpus", [frozenset({0})])
    clock = [100.0]
    monkeypatch.setattr(workers.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(workers, "_load_seen", [-workers.LOAD_CHECK_S, False])
    for _ in range(3):
        with workers._off_pool_cpus():
            pass
    assert moves == [{0}, {0, 1}] * 3 and readings == [0.5]  # idle: moved each time, one reading
    moves.clear()
    load[0] = 3.5  # other processes keep both CPUs busy
    with workers._off_pool_cpus():
        pass
    assert moves == [{0}, {0, 1}]  # the last reading still holds
    clock[0] += workers.LOAD_CHECK_S
    moves.clear()
    for _ in range(3):
        with workers._off_pool_cpus():
            pass
    assert moves == [] and readings == [0.5, 3.5]  # busy: left where it is


def test_a_step_block_moves_the_caller_once_for_all_its_kernels(monkeypatch):
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("needs sched_setaffinity")
    moves = []
    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(workers.os, "sched_setaffinity", lambda pid, cpus: moves.append(set(cpus)))
    monkeypatch.setattr(workers.os, "getloadavg", lambda: (0.5, 0.0, 0.0))
    monkeypatch.setattr(workers, "_count", [2])
    monkeypatch.setattr(workers, "_caller_cpus", [frozenset({0})])
    monkeypatch.setattr(workers, "_load_seen", [-workers.LOAD_CHECK_S, False])
    with workers.blas_for_workers():
        for _ in range(5):  # the kernels of a step
            with workers._off_pool_cpus():
                pass
    assert moves == [{0}, {0, 1}]  # one move for the block, none per kernel
    moves.clear()
    with workers._off_pool_cpus():  # outside a block: each kernel moves the caller itself
        pass
    assert moves == [{0}, {0, 1}]


def test_a_pool_made_inside_a_step_block_counts_and_pins_the_process_cpus(monkeypatch):
    """set_worker_count inside a block that moved the caller onto its own CPU: the new
    pool still sees the process's CPUs (it saw only the caller's, so two workers became
    one and the pool thread shared the caller's CPU)."""
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("needs sched_setaffinity")
    from singa.kernels import blas_threads

    mask = [{0, 1}]
    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda pid: set(mask[0]))
    monkeypatch.setattr(workers.os, "sched_setaffinity", lambda pid, cpus: mask.__setitem__(0, set(cpus)))
    monkeypatch.setattr(workers.os, "getloadavg", lambda: (0.5, 0.0, 0.0))
    if blas_threads.controller() is None:
        pytest.skip("needs a BLAS that threadpoolctl controls")
    monkeypatch.setattr(workers, "_count", [2])
    monkeypatch.setattr(workers, "_caller_cpus", [frozenset({0})])
    monkeypatch.setattr(workers, "_load_seen", [-workers.LOAD_CHECK_S, False])
    with workers.blas_for_workers():
        assert mask[0] == {0}  # the caller is placed for the block
        assert workers._cores() == 2
        assert workers._placement(2) == ([1], frozenset({0}))
    assert mask[0] == {0, 1}
    assert workers._home_masks == {}
