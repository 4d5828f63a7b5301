"""Pool threads that take a job within microseconds of being asked.

:func:`singa.kernels.workers.run_pieces` hands each split kernel to its pool threads
and takes pieces itself beside them. With a ``ThreadPoolExecutor`` a pool thread slept
in a queue and started 110-120 us (median) after the caller asked (2-vCPU VM,
``bench/README.md``), so a memory-bound kernel on a million elements (a ReLU, a
residual add, 0.2-0.5 ms on one core) ran no faster on two cores than on one.

Here each pool thread waits on a word of shared memory with the GIL released
(:mod:`singa.kernels.futex_wait`): it spins for about :data:`SPIN_S` after its last
job, which covers the gaps between the kernels of a training step, and then sleeps in
the kernel until the next job wakes it. The caller likewise waits for a thread's job to
end without the GIL. A spinning thread gives its CPU to any other runnable thread
between looks, but it keeps the CPU busy while the caller runs Python between kernels:
CPU time per step goes up while wall time goes down.

Protocol (one thread, one slot): the caller puts ``(number, job)`` in the slot and
publishes ``number`` in the thread's POSTED word; the thread, on seeing the word
change, takes the slot's job (``list.pop`` is atomic under the GIL), runs it and
publishes its number in the DONE word. The caller, once its own pieces are done, takes
the job back if the thread has not (the thread finds the slot empty and waits again),
else waits for DONE to show the number.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from singa.kernels import futex_wait

__all__ = ["SpinPool", "SPIN_S"]

#: about how long (seconds) a pool thread, or a caller waiting for one, spins before
#: sleeping in the kernel
SPIN_S = 2e-3
_SPINS = int(SPIN_S / 0.25e-6)  # one look and one sched_yield: about 0.25 us
_POSTED, _DONE = 0, 1


def _stop() -> None:
    """The job that ends a pool thread (never called)."""


class _Thread:
    """One pool thread with its slot and its two words."""

    def __init__(self, name: str, cpu: int | None):
        self.words = np.zeros(2, np.int32)
        self.slot: list = []
        self.number = 0
        self.pending = False  # a job posted and not yet joined
        self.thread = threading.Thread(target=self._serve, args=(cpu,), name=name, daemon=True)
        self.thread.start()

    def _serve(self, cpu: int | None) -> None:
        if cpu is not None:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, {cpu})
        seen = 0
        futex_wait.wait_while(self.words, _POSTED, seen, _SPINS)
        while True:
            seen = int(self.words[_POSTED])
            try:
                number, job = self.slot.pop()
            except IndexError:  # taken back by the caller
                futex_wait.wait_while(self.words, _POSTED, seen, _SPINS)
                continue
            if job is _stop:
                return
            try:
                job()
            finally:  # say so, and wait for the next job, with no GIL between the two
                # drop the job first: its pieces hold views of the caller's arrays, and a
                # reference kept while waiting stopped the next operator from reusing
                # them in place (buffers.owns counts references)
                job = None
                futex_wait.store_wake_and_wait(self.words, _DONE, number, _POSTED, seen, _SPINS)

    def post(self, job: Callable[[], Any]) -> None:
        """Hand ``job`` to the thread (the slot must be empty)."""
        self.number = self.number % 0x7FFFFFFF + 1
        self.pending = True
        self.slot.append((self.number, job))
        futex_wait.store_and_wake(self.words, _POSTED, self.number)

    def join(self) -> None:
        """Take the posted job back if the thread has not taken it, else wait for it
        to end."""
        if not self.pending:
            return
        self.pending = False
        try:
            self.slot.pop()
        except IndexError:
            futex_wait.wait_for(self.words, _DONE, self.number, _SPINS)


def _compile_waits() -> None:
    """Compile (or load) the waits here, before any thread waits on them: a pool thread
    compiling one would hold the GIL for a second."""
    words = np.array([1, 0], np.int32)
    futex_wait.wait_while(words, 0, 0, 1)
    futex_wait.wait_for(words, 0, 1, 1)
    futex_wait.store_and_wake(words, 1, 0)
    futex_wait.store_wake_and_wait(words, 1, 0, 0, 0, 1)


class SpinPool:
    """``count`` pool threads named ``prefix_i``, pinned to ``cpus[i]`` when given."""

    def __init__(self, count: int, prefix: str, cpus: Sequence[int] | None = None):
        _compile_waits()
        self._threads = [_Thread(f"{prefix}_{i}", cpus[i] if cpus else None) for i in range(count)]

    def start(self, job: Callable[[], Any], count: int) -> list:
        """Run ``job()`` on ``count`` of the threads; returns what :meth:`join` takes."""
        busy = self._threads[:count]
        for t in busy:
            t.post(job)
        return busy

    @staticmethod
    def join(started: list) -> None:
        """Wait for the jobs :meth:`start` handed out (or take back those not begun)."""
        for t in started:
            t.join()

    def shutdown(self) -> None:
        """Stop every thread once its current job ends, and wait for them."""
        for t in self._threads:
            t.join()
            t.post(_stop)
        for t in self._threads:
            t.thread.join()
