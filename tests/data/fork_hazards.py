"""A fork hazard for the worker tests (this module holds no tests): garbage whose
finalizer takes a lock that the parent holds while it forks."""

from __future__ import annotations

import contextlib
import gc
import threading


class Finalizing:
    """Garbage (a reference cycle) whose finalizer takes a lock, as a progress bar's
    close does."""

    lock = threading.Lock()

    def __init__(self):
        self.me = self

    def __del__(self):
        with self.lock:
            pass


@contextlib.contextmanager
def lock_held_over_garbage():
    """Inside: a :class:`Finalizing` left as garbage (the collector off, so it waits to be
    found) and its lock held, as by one of the parent's threads. A worker forked inside
    that collected the garbage would wait for ever. Collected here afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        Finalizing()
        with Finalizing.lock:
            yield
    finally:
        if was_enabled:
            gc.enable()
    gc.collect()
