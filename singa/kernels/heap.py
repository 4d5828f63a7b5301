"""Keeping freed array memory in the process instead of handing it back to the system.

numpy takes each large array from C's ``malloc``. glibc's ``malloc`` maps an array above
its mmap threshold (128 KiB at start, raised up to the largest freed mapping) straight
from the system and unmaps it when freed, and gives the free top of its heap back once
it exceeds the trim threshold (twice the mmap threshold). A training step allocates and
frees the same large temporaries every step (attention scores, activations, gradients),
so each step faulted tens of megabytes of fresh, zeroed pages back in: the ``gpt``
graph step (batch 16, context 128) took 5,351 minor page faults and 12 ms of system time
per step (one thread, load 1.4), and none with the thresholds below (CPU time per step
302 against 262 ms).

:func:`keep_freed_memory` sets the mmap threshold to 32 MiB (glibc's largest dynamic
value; larger arrays are still mapped and unmapped) and the trim threshold to 256 MiB,
once per process, on glibc only; a model call does it. The memory a step frees stays
in the process for the next step, so the resident size after a step stays near its
peak (at most 256 MiB more is kept); the peak itself is what the step needs.
``SINGA_KEEP_FREED_MEMORY=0`` leaves ``malloc`` as it is. Results do not depend on it.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["keep_freed_memory", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]

#: arrays up to this size come from the heap and are reused (glibc's largest dynamic value)
MMAP_THRESHOLD = 32 << 20
#: free memory at the heap's top kept in the process up to this size
TRIM_THRESHOLD = 256 << 20
_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
_done: list = []  # [bool]: whether the thresholds were set, once tried


def _mallopt() -> object | None:
    """glibc's ``mallopt``, or None on another C library or platform."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        if not hasattr(libc, "gnu_get_libc_version"):  # musl and others: not glibc's malloc
            return None
        fn = libc.mallopt
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return fn


def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds (:data:`MMAP_THRESHOLD`,
    :data:`TRIM_THRESHOLD`) once per process; whether they are set (False on another
    C library or platform, or with ``SINGA_KEEP_FREED_MEMORY=0``)."""
    if not _done:
        ok = False
        if os.environ.get("SINGA_KEEP_FREED_MEMORY", "1").strip() != "0":
            fn = _mallopt()
            ok = fn is not None and bool(fn(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
            ok = ok and bool(fn(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
        _done.append(ok)
    return _done[0]
