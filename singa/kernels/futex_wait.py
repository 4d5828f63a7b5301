"""Waiting on a word of shared memory without the GIL: spin a while, then sleep in the
Linux kernel (a futex) until another thread changes the word and wakes it.

A pool thread that sleeps in Python (a queue, an event) needs the GIL to go to sleep and
again to wake, and a sleeping CPU of a VM takes 50-120 us to wake: on the 2-vCPU VM of
``bench/README.md`` a pool thread started its piece of a kernel 110-120 us (median) after
the caller asked, about the time of a whole 1-million-element ReLU. These functions
wait with the GIL released from the first instruction to the last, so a thread that
waits needs the GIL only once the word has changed.

Only where the futex system call is known (Linux on x86-64 and AArch64:
:func:`singa.kernels.workers.futex_available`); nothing imports this module elsewhere.
The words are ``int32`` elements of a numpy array, as the futex call needs.
"""

from __future__ import annotations

import platform
from typing import Any

from numba.core import types

from singa.kernels.jit import helper, kernel

__all__ = ["SETTLE_SPINS", "wait_while", "wait_for", "store_and_wake", "store_wake_and_wait"]

#: yields (about 0.25 us each) between seeing a job's word change and taking the GIL: the
#: thread that changed it goes on in Python until its own kernel releases the GIL, and
#: a thread that asks for the GIL before then sleeps in CPython's wait and takes 40-60
#: us to wake on a VM. Two pieces of a 262,144-element ReLU took 70-85 us (median)
#: without this pause and 38-58 us with it; a pool thread started a product's second
#: block 50-62 us after the ask without it, 41-45 us with it (2-vCPU VM).
SETTLE_SPINS = 80
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}[platform.machine()]  # the system call's number
_FUTEX_WAIT_PRIVATE = 128  # FUTEX_WAIT | FUTEX_PRIVATE_FLAG: sleep while the word holds a value
_FUTEX_WAKE_PRIVATE = 129  # FUTEX_WAKE | FUTEX_PRIVATE_FLAG: wake the word's sleepers

# C functions that the compiled waits call by name (numba links them from the C library
# already loaded in the process, and can cache the compiled code, unlike a ctypes pointer)
_syscall = types.ExternalFunction(
    "syscall", types.int64(types.int64, types.intp, types.int64, types.int64, types.intp)
)
_sched_yield = types.ExternalFunction("sched_yield", types.int32())


@helper
def _wait_changed(words, i, value, spins):  # pragma: no cover (compiled into the waits)
    """The body of :func:`wait_while`."""
    for _ in range(spins):
        if words[i] != value:
            for _ in range(SETTLE_SPINS):
                _sched_yield()
            return
        _sched_yield()
    address = words.ctypes.data + 4 * i
    while words[i] == value:  # the kernel sleeps only while the word still holds value
        _syscall(_SYS_FUTEX, address, _FUTEX_WAIT_PRIVATE, value, 0)


@kernel
def wait_while(words: Any, i: int, value: int, spins: int) -> None:
    """Return once ``words[i]`` differs from ``value``: look ``spins`` times (giving the
    CPU to any other runnable thread between looks, about 0.25 us each; once the word
    has changed, :data:`SETTLE_SPINS` more), then sleep in the kernel until a
    :func:`store_and_wake` of that word."""
    _wait_changed(words, i, value, spins)


@kernel
def wait_for(words: Any, i: int, value: int, spins: int) -> None:
    """Return once ``words[i]`` equals ``value``, waiting as :func:`wait_while` does."""
    for _ in range(spins):
        if words[i] == value:
            return
        _sched_yield()
    address = words.ctypes.data + 4 * i
    while True:
        now = words[i]
        if now == value:
            return
        _syscall(_SYS_FUTEX, address, _FUTEX_WAIT_PRIVATE, now, 0)


@kernel(release_gil=False)
def store_and_wake(words: Any, i: int, value: int) -> None:
    """``words[i] = value``, then wake every thread sleeping on that word (a system
    call of about a microsecond; the kernel orders it after the store). The caller keeps
    the GIL: a pool thread woken by the store would take it at once, and the caller,
    going on in Python, would wait 60 us (median) for it to come back (ResNet-20 graph
    step: 131 posts, 7.6 ms)."""
    words[i] = value
    _syscall(_SYS_FUTEX, words.ctypes.data + 4 * i, _FUTEX_WAKE_PRIVATE, 1 << 30, 0)


@kernel
def store_wake_and_wait(words: Any, i: int, value: int, j: int, seen: int, spins: int) -> None:
    """:func:`store_and_wake` of ``words[i] = value``, then :func:`wait_while`
    ``words[j]`` holds ``seen``, in one call without the GIL: a thread that tells
    another it is done and then waits needs no GIL in between, so the other one, waking
    to take the GIL, finds it free."""
    words[i] = value
    _syscall(_SYS_FUTEX, words.ctypes.data + 4 * i, _FUTEX_WAKE_PRIVATE, 1 << 30, 0)
    _wait_changed(words, j, seen, spins)
