"""Worker processes that build batches for :class:`singa.data.DataLoader`.

Each worker owns a task queue; batch ``k`` of an epoch goes to worker ``k % workers``
(the assignment never depends on timing) and every result carries its batch number, so
the loader hands batches out in order and they are the same as with no workers.
Results of an abandoned epoch carry an old epoch token and are dropped. A worker that
fails sends its exception back (raised by the loader in the main process); a worker
that dies is reported with its exit code.

Processes start with ``fork`` where the platform has it (the dataset is not copied),
else ``spawn`` (the dataset is pickled to each worker).
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import traceback
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["WorkerPool", "WorkerError", "build_batch"]

#: seconds between liveness checks while waiting for a batch
POLL_S = 1.0


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


class WorkerPool:
    """``workers`` processes building batches of ``dataset`` with ``collate_fn``.

    Args:
        dataset: the map-style dataset (see :mod:`singa.data.dataset`).
        workers: number of processes (>= 1).
        collate_fn: turns a list of samples into a batch.
        prefetch: batches each worker may have queued or built ahead of the consumer.
    """

    def __init__(self, dataset: Any, workers: int, collate_fn: Callable, prefetch: int = 2):
        ctx = _context()
        self.workers = int(workers)
        self.prefetch = max(1, int(prefetch))
        self._results = ctx.Queue()
        self._tasks = [ctx.Queue() for _ in range(self.workers)]
        self._procs = [
            ctx.Process(target=_worker_main, args=(dataset, collate_fn, q, self._results), daemon=True)
            for q in self._tasks
        ]
        for p in self._procs:
            p.start()
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
            while k not in ready:
                self._receive(token, ready)
            yield ready.pop(k)

    def _receive(self, token: int, ready: dict) -> None:
        while True:
            try:
                got, number, out, err = self._results.get(timeout=POLL_S)
                break
            except queue.Empty:
                self._check_alive()
        if got != token:
            return  # a result of an abandoned epoch
        if err is not None:
            raise err
        ready[number] = out

    def _check_alive(self) -> None:
        for i, p in enumerate(self._procs):
            if not p.is_alive():
                raise WorkerError(f"DataLoader worker {i} (pid {p.pid}) died with exit code {p.exitcode}")

    @property
    def alive(self) -> bool:
        """Whether every worker process is running."""
        return all(p.is_alive() for p in self._procs)

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
