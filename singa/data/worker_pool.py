"""Worker processes that build batches for :class:`singa.data.DataLoader`.

Each worker owns a task queue; batch ``k`` of an epoch goes to worker ``k % workers``
(the assignment never depends on timing) and every result carries its batch number, so
the loader hands batches out in order and they are the same as with no workers.
Results of an abandoned epoch carry an old epoch token and are dropped. A worker that
fails sends its exception back (raised by the loader in the main process); a worker
that dies is reported with its exit code.

Processes start with ``fork`` where the platform has it (the dataset is not copied),
else ``spawn`` (the dataset is pickled to each worker). The workers are forked with the
garbage collector off and every object frozen (``gc.freeze``, as Python's documentation
advises for fork without exec), and a worker never unfreezes them: it never runs the
finalizers of the parent's leftover garbage (a progress bar's close waiting on a lock
that a thread of the parent held at the fork, a file's close, a join of processes not
its own), and it does not copy the parent's pages by touching them.

With a ``timeout``, a batch that has not arrived after that many seconds of waiting
raises :class:`WorkerError` naming the worker, after each live worker has written the
stacks of its threads to standard error (``faulthandler`` on ``SIGUSR1``, where the
platform has it): a stuck worker is reported instead of hanging the training run.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import multiprocessing as mp
import os
import queue
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["WorkerPool", "WorkerError", "build_batch", "frozen_for_fork", "start_frozen", "enter_worker"]

#: seconds between liveness checks while waiting for a batch
POLL_S = 1.0
#: the signal that makes a worker write its threads' stacks to standard error
DUMP_SIGNAL = getattr(signal, "SIGUSR1", None)
#: seconds given to each worker, in turn, to write its stacks before a timeout is raised
DUMP_WAIT_S = 0.25


class WorkerError(RuntimeError):
    """A DataLoader worker process failed or died."""


def build_batch(dataset: Any, indices: Any, collate_fn: Callable) -> Any:
    """The batch of ``dataset`` at ``indices``: ``dataset.get_batch`` when it has one,
    else ``collate_fn`` of the samples."""
    get_batch = getattr(dataset, "get_batch", None)
    if get_batch is not None:
        return get_batch(indices)
    return collate_fn([dataset[int(i)] for i in indices])


def _worker_main(dataset: Any, collate_fn: Callable, tasks: Any, results: Any) -> None:
    """Build batches until a None task arrives."""
    enter_worker()
    if DUMP_SIGNAL is not None and sys.__stderr__ is not None:
        faulthandler.register(DUMP_SIGNAL, file=sys.__stderr__, all_threads=True)
    while True:
        task = tasks.get()
        if task is None:
            return
        token, number, indices = task
        try:
            out = build_batch(dataset, indices, collate_fn)
            results.put((token, number, out, None))
        except Exception as e:  # sent back and raised by the loader
            results.put((token, number, None, _portable(e)))


def _portable(e: Exception) -> Exception:
    """``e`` if it survives pickling, else a WorkerError with its text and traceback."""
    import pickle

    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        return WorkerError(f"{type(e).__name__}: {e}\n{tb}")


def _context() -> Any:
    methods = mp.get_all_start_methods()
    return mp.get_context("fork" if "fork" in methods else "spawn")


@contextlib.contextmanager
def frozen_for_fork() -> Iterator[None]:
    """Fork inside this block: the garbage collector is off and every object frozen (see
    the module's notes). Leaving it, the process that entered gets its collector back as
    it was; a forked child that leaves it (``os.fork()`` inside) only turns collection
    back on, over its own objects: what it inherited stays frozen."""
    was_enabled, parent = gc.isenabled(), os.getpid()
    gc.disable()
    gc.freeze()
    try:
        yield
    finally:
        if os.getpid() != parent:
            enter_worker()
        else:
            gc.unfreeze()
            if was_enabled:
                gc.enable()


def start_frozen(procs: list) -> None:
    """Start the processes ``procs`` inside :func:`frozen_for_fork`; each calls
    :func:`enter_worker` first (a forked process never leaves the block)."""
    with frozen_for_fork():
        for p in procs:
            p.start()


def enter_worker() -> None:
    """The first call of a process started by :func:`start_frozen`: the garbage collector
    runs again, over the worker's own objects only (what it inherited stays frozen)."""
    gc.enable()


class WorkerPool:
    """``workers`` processes building batches of ``dataset`` with ``collate_fn``.

    Args:
        dataset: the map-style dataset (see :mod:`singa.data.dataset`).
        workers: number of processes (>= 1).
        collate_fn: turns a list of samples into a batch.
        prefetch: batches each worker may have queued or built ahead of the consumer.
        timeout: seconds to wait for one batch before raising :class:`WorkerError`
            (0: wait as long as the workers live).
    """

    def __init__(
        self, dataset: Any, workers: int, collate_fn: Callable, prefetch: int = 2, timeout: float = 0
    ):
        ctx = _context()
        self.workers = int(workers)
        self.prefetch = max(1, int(prefetch))
        self.timeout = float(timeout)
        self._results = ctx.Queue()
        self._tasks = [ctx.Queue() for _ in range(self.workers)]
        self._procs = [
            ctx.Process(target=_worker_main, args=(dataset, collate_fn, q, self._results), daemon=True)
            for q in self._tasks
        ]
        start_frozen(self._procs)
        self._token = 0

    def run(self, batches: list) -> Iterator:
        """Yield the batches for the index arrays ``batches``, in order, keeping at most
        ``prefetch * workers`` of them in flight."""
        self._token += 1
        token = self._token
        ahead = self.prefetch * self.workers
        sent = 0
        ready: dict[int, Any] = {}
        for k in range(len(batches)):
            while sent < len(batches) and sent < k + ahead:
                self._tasks[sent % self.workers].put((token, sent, batches[sent]))
                sent += 1
            since = time.monotonic()
            while k not in ready:
                self._receive(token, ready)
                self._check_waited(k, since)
            yield ready.pop(k)

    def _receive(self, token: int, ready: dict) -> None:
        try:
            got, number, out, err = self._results.get(timeout=POLL_S)
        except queue.Empty:
            self._check_alive()
            return
        if got != token:
            return  # a result of an abandoned epoch
        if err is not None:
            raise err
        ready[number] = out

    def _check_alive(self) -> None:
        for i, p in enumerate(self._procs):
            if not p.is_alive():
                raise WorkerError(f"DataLoader worker {i} (pid {p.pid}) died with exit code {p.exitcode}")

    def _check_waited(self, number: int, since: float) -> None:
        """Raise WorkerError once batch ``number`` is ``timeout`` seconds late."""
        if self.timeout <= 0 or time.monotonic() - since < self.timeout:
            return
        for p in self._procs:
            if DUMP_SIGNAL is not None and p.is_alive() and p.pid is not None:
                os.kill(p.pid, DUMP_SIGNAL)
                time.sleep(DUMP_WAIT_S)  # one after the other: their lines do not mix
        w, pid = number % self.workers, self._procs[number % self.workers].pid
        for p in self._procs:
            p.terminate()
        self.close()  # a later epoch starts new workers
        raise WorkerError(
            f"DataLoader: batch {number} did not arrive from worker {w} (pid {pid}) "
            f"within {self.timeout:g} s; the workers' stacks are on standard error"
        )

    @property
    def alive(self) -> bool:
        """Whether the pool is open and every worker process is running."""
        return bool(self._procs) and all(p.is_alive() for p in self._procs)

    def close(self) -> None:
        """Stop the workers (they finish the batch in hand) and wait for them."""
        if not self._procs:
            return
        for q in self._tasks:
            try:
                q.put(None)
            except (ValueError, OSError):  # pragma: no cover - queue already closed
                pass
        for p in self._procs:
            p.join(timeout=5)
            if p.is_alive():  # pragma: no cover - a worker stuck in a decode
                p.terminate()
                p.join(timeout=1)
        for q in [*self._tasks, self._results]:
            q.close()
            q.cancel_join_thread()
        self._procs = []
