"""singa.kernels.spin_pool and futex_wait: jobs handed to pool threads that wait
without the GIL, taken back when not begun, and waits that sleep and wake."""

import threading
import time

import numpy as np
import pytest

from singa.kernels import workers

pytestmark = pytest.mark.skipif(not workers.futex_available(), reason="needs Linux's futex call")


@pytest.fixture
def pool():
    from singa.kernels.spin_pool import SpinPool

    p = SpinPool(2, "test-spin")
    yield p
    p.shutdown()


def _names(p) -> set:
    return {t.thread.name for t in p._threads}


def test_a_started_job_runs_on_the_pool_threads_and_join_waits_for_it(pool):
    ran, gate, begun = [], threading.Event(), threading.Semaphore(0)

    def job():
        begun.release()
        gate.wait(timeout=30)
        ran.append(threading.current_thread().name)

    started = pool.start(job, 2)
    assert begun.acquire(timeout=30) and begun.acquire(timeout=30)  # both threads took it
    assert ran == []
    gate.set()
    pool.join(started)
    assert sorted(ran) == sorted(_names(pool))


def test_a_job_not_begun_is_taken_back_and_never_runs(pool):
    ran = []
    for _ in range(200):  # ask and take back at once, over and over
        started = pool.start(lambda: ran.append(1), 1)
        pool.join(started)
    runs = len(ran)
    time.sleep(0.05)
    assert len(ran) == runs  # nothing taken back ran later
    assert all(not th.slot for th in pool._threads)


def test_jobs_handed_out_after_a_long_idle_wake_the_sleeping_threads(pool):
    from singa.kernels import spin_pool

    time.sleep(spin_pool.SPIN_S * 20)  # long past the spin: the threads sleep in the kernel
    seen, begun = [], threading.Semaphore(0)
    started = pool.start(lambda: (seen.append(threading.current_thread().name), begun.release()), 2)
    assert begun.acquire(timeout=30) and begun.acquire(timeout=30)  # both woke and took it
    pool.join(started)
    assert sorted(seen) == sorted(_names(pool))


def test_shutdown_ends_every_thread():
    from singa.kernels.spin_pool import SpinPool

    p = SpinPool(2, "test-stop")
    p.join(p.start(lambda: None, 2))
    p.shutdown()
    assert not any(t.thread.is_alive() for t in p._threads)


def test_a_wait_sleeps_in_the_kernel_and_wakes_on_a_store():
    from singa.kernels import futex_wait

    words = np.zeros(2, np.int32)
    done = []

    def wait() -> None:
        futex_wait.wait_while(words, 1, 0, 0)
        done.append(int(words[1]))

    waiter = threading.Thread(target=wait)
    waiter.start()  # no spinning: straight to the kernel's sleep
    time.sleep(0.05)
    assert done == []
    futex_wait.store_and_wake(words, 1, 7)
    waiter.join(timeout=30)
    assert done == [7]


def test_wait_for_returns_on_the_value_and_store_wake_and_wait_signals_then_waits():
    from singa.kernels import futex_wait

    words = np.zeros(2, np.int32)
    order = []

    def other():
        futex_wait.store_wake_and_wait(words, 1, 5, 0, 0, 0)  # say 5, then wait for word 0 to move
        order.append(int(words[0]))

    t = threading.Thread(target=other)
    t.start()
    futex_wait.wait_for(words, 1, 5, 0)
    assert order == []  # the other thread is still waiting on word 0
    futex_wait.store_and_wake(words, 0, 3)
    t.join(timeout=30)
    assert order == [3]


def test_run_pieces_uses_the_executor_pool_where_there_is_no_futex(monkeypatch):
    monkeypatch.setattr(workers, "futex_available", lambda: False)
    workers.set_worker_count(2)
    try:
        names = workers.run_pieces(lambda i: threading.current_thread().name, [(i,) for i in range(8)])
        assert type(workers._pool[0]).__name__ == "_ExecutorPool"
        assert len(names) == 8
    finally:
        workers.set_worker_count(None)


def test_a_finished_job_is_not_held_while_the_thread_waits(pool):
    """The thread drops its last job before it waits for the next: the job's pieces
    hold views of the caller's arrays, and a reference kept stopped the next operator
    from writing into them in place (buffers.owns counts references)."""
    import gc
    import weakref

    class Payload:
        pass

    payload, begun = Payload(), threading.Semaphore(0)
    alive = weakref.ref(payload)

    def job(p=payload):
        begun.release()

    started = pool.start(job, 2)
    assert begun.acquire(timeout=30) and begun.acquire(timeout=30)
    pool.join(started)
    del job, payload, started
    gc.collect()
    assert alive() is None
