"""One background write at a time: the thread of an asynchronous checkpoint save.

Writes run on one worker thread that is started once and then waits for work, so a
save hands its job over without waiting for a new thread to start (``Thread.start``
blocks until the thread runs, and the new thread then holds the interpreter lock for
a while). A write's error is kept and raised by the next :meth:`BackgroundWriter.wait`
(which the next save calls first). The worker is a daemon thread, and an ``atexit``
hook waits for every write in flight before the interpreter finalizes, so process
exit waits for the write; an error nobody collected is printed to stderr then."""

from __future__ import annotations

import atexit
import os
import queue
import sys
import threading
import weakref
from collections.abc import Callable

_writers: weakref.WeakSet[BackgroundWriter] = weakref.WeakSet()
_jobs: queue.SimpleQueue = queue.SimpleQueue()
_worker: threading.Thread | None = None
_worker_lock = threading.Lock()


def _work() -> None:
    while True:
        writer, fn = _jobs.get()
        writer.run(fn)


def _ensure_worker() -> None:
    global _worker
    with _worker_lock:
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_work, name="singa-checkpoint-save", daemon=True)
            _worker.start()


def _forget_worker() -> None:
    """In a forked child the parent's worker does not exist: start afresh."""
    global _worker, _jobs
    _worker, _jobs = None, queue.SimpleQueue()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_worker)


class BackgroundWriter:
    """Runs one function at a time in the background; see the module's notes."""

    def __init__(self) -> None:
        self._idle = threading.Event()
        self._idle.set()
        self._error: BaseException | None = None
        self._what = ""
        _writers.add(self)

    @property
    def busy(self) -> bool:
        """True while a write is queued or running."""
        return not self._idle.is_set()

    def submit(self, fn: Callable[[], None], what: str) -> None:
        """Wait for the write in flight (raising its error), then hand ``fn`` to the
        worker and return at once; ``what`` names it in error messages."""
        self.wait()
        self._what = what
        self._idle.clear()
        _ensure_worker()
        _jobs.put((self, fn))

    def run(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` (on the worker), keeping its error for :meth:`wait`."""
        try:
            fn()
        except BaseException as e:  # kept for wait(): never lost
            self._error = e
        finally:
            self._idle.set()

    def wait(self) -> None:
        """Block until the write in flight is done; raise its error if it failed."""
        self._idle.wait()
        err, self._error = self._error, None
        if err is not None:
            raise err

    def report_at_exit(self) -> None:
        """Wait for the write in flight and print an uncollected error to stderr."""
        try:
            self.wait()
        except BaseException as e:
            print(f"singa: the asynchronous checkpoint save {self._what} failed: {e}", file=sys.stderr)


@atexit.register
def _wait_all() -> None:
    for w in list(_writers):
        w.report_at_exit()
