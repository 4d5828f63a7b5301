"""One background write at a time: the thread of an asynchronous checkpoint save.

A write's error is kept and raised by the next :meth:`BackgroundWriter.wait` (which
the next save calls first); the thread is not a daemon, so the interpreter waits for
it before exiting, and an error nobody collected is printed to stderr at exit."""

from __future__ import annotations

import atexit
import sys
import threading
import weakref
from collections.abc import Callable

_writers: weakref.WeakSet[BackgroundWriter] = weakref.WeakSet()


class BackgroundWriter:
    """Runs one function at a time on a (non-daemon) thread; see the module's notes."""

    def __init__(self, name: str = "singa-checkpoint-save"):
        self.name = name
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._what = ""
        self._lock = threading.Lock()
        _writers.add(self)

    @property
    def busy(self) -> bool:
        """True while a write is running."""
        t = self._thread
        return t is not None and t.is_alive()

    def submit(self, fn: Callable[[], None], what: str) -> None:
        """Wait for the write in flight (raising its error), then run ``fn`` on a new
        thread; ``what`` names it in error messages."""
        self.wait()
        with self._lock:
            self._what = what
            self._thread = threading.Thread(target=self._run, args=(fn,), name=self.name, daemon=False)
            self._thread.start()

    def _run(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as e:  # kept for wait(): never lost
            self._error = e

    def wait(self) -> None:
        """Block until the write in flight is done; raise its error if it failed."""
        with self._lock:
            t = self._thread
        if t is not None:
            t.join()
        with self._lock:
            err, self._error = self._error, None
            if t is not None and self._thread is t:
                self._thread = None
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
