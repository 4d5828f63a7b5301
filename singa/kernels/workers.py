"""Running a kernel's independent pieces on several cores.

numpy runs its elementwise loops, copies and reductions on one thread, and on the
skinny products of a convolution OpenBLAS's second thread mostly waits
(``bench/README.md``: a second thread speeds PyTorch's CNN step up 1.3-1.9x, ours
0.9-1.5x, while our CPU time per step doubles). numpy and BLAS release the GIL inside
their loops, so a kernel that cuts its work into independent pieces (batch slices,
channel groups) can run them on a few Python threads, each piece's matrix products on
one BLAS thread, and use every core for the whole kernel.

Determinism: the pieces a caller makes depend only on the work's shape, never on the
number of workers, and :func:`run_pieces` returns the results in piece order, so a
caller that combines partial results (sums a weight gradient over batch slices) in
that order gets the same bits with one worker or many, on every run.

The worker count is ``SINGA_NUM_THREADS`` when set, else the thread count of numpy's
BLAS when threadpoolctl can read it (``OMP_NUM_THREADS=1`` gives one worker), else the
cores this process may run on. With one worker, or one piece, the pieces run inline
in the calling thread. The pool threads wait for work without the GIL and take it
within microseconds (:mod:`singa.kernels.spin_pool`; a ``ThreadPoolExecutor`` where
Linux's futex call is not available).

Placement: when the workers use every CPU this process may run on (the default), each
pool thread is pinned to a CPU of its own and the calling thread keeps off those CPUs
while it takes pieces beside them (its own CPU mask is put back after). Left to
itself, Linux put a pool thread woken after an idle spell on the waking thread's CPU
and took 40-50 ms to move one of them: on a 2-vCPU VM, a batch-64 CNN inference ran its
first 5-7 calls after a 0.3 s pause on one core (wall time = CPU time, 3-9 involuntary
context switches a call; ``bench/README.md``, ninth round). With fewer workers than
CPUs (several processes sharing a machine), or without threadpoolctl to hold numpy's
BLAS to one thread per piece, nothing is pinned. While the load average is above the
worker count (other processes compete for the CPUs), the calling thread is not moved:
forced onto a CPU another process holds, it waits for it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import platform
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from singa.kernels import blas_threads

__all__ = [
    "worker_count",
    "set_worker_count",
    "run_pieces",
    "run_flat",
    "even_pieces",
    "work_pieces",
    "blas_for_workers",
    "PIECE_WORK",
    "MAX_PIECES",
]

_THREAD_PREFIX = "singa-worker"
_pool: list = []  # [SpinPool or _ExecutorPool], made on first use
_count: list = []  # [int], read on first use
_caller_cpus: list = []  # [frozenset]: the CPUs left to the calling thread, when the pool is pinned
_home_masks: dict = {}  # thread id -> its CPU mask before _off_pool_cpus moved it
_in_use: list = [threading.Lock()]  # held by the one run_pieces call that the pool serves


def _forget_pool() -> None:
    _pool.clear()  # a forked child has none of the parent's threads
    _caller_cpus.clear()
    _in_use[:] = [threading.Lock()]  # nor any call that they served


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _own_cpus() -> set[int]:
    """The CPUs the calling thread may run on, as they were before :func:`_off_pool_cpus`
    moved it for a block: a pool made inside that block (:func:`set_worker_count` in a
    training step) must count and pin the process's CPUs, not the one left to the caller."""
    return _home_masks.get(threading.get_ident()) or os.sched_getaffinity(0)


def _cores() -> int:
    try:
        return len(_own_cpus())
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def worker_count() -> int:
    """How many threads :func:`run_pieces` uses (read once per process)."""
    if not _count:
        env = os.environ.get("SINGA_NUM_THREADS", "").strip()
        if env:
            if not env.isdigit() or int(env) < 1:
                raise ValueError(f"SINGA_NUM_THREADS must be a positive integer, got {env!r}")
            n = int(env)
        else:
            n = blas_threads.configured_threads() or _cores()
        _count.append(max(1, min(n, _cores())))
    return _count[0]


def set_worker_count(n: int | None) -> None:
    """Use ``n`` threads (at most the cores this process may run on) from the next
    :func:`run_pieces` on, or with None read the setting again as at start-up
    (``SINGA_NUM_THREADS``, then numpy's BLAS). Results do not depend on it (see the
    module docstring). Not while a kernel runs on the workers."""
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"set_worker_count: n must be a positive integer or None, got {n!r}")
    if _pool:
        _pool.pop().shutdown()
    _caller_cpus.clear()
    _count.clear()
    if n is not None:
        _count.append(min(n, _cores()))


def even_pieces(n: int, parts: int) -> list[tuple[int, int]]:
    """``range(n)`` cut into at most ``parts`` contiguous ``(start, stop)`` pieces of
    sizes differing by at most one (fewer pieces when ``n < parts``)."""
    parts = max(1, min(parts, n))
    base, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        stop = start + base + (i < extra)
        out.append((start, stop))
        start = stop
    return out


@contextlib.contextmanager
def blas_for_workers() -> Iterator[None]:
    """Hold numpy's BLAS on one thread for the whole block (a training step, an
    inference call) when there are several workers, so the kernels split their work
    over the workers alone. Limiting BLAS only around each split kernel is not
    enough: OpenBLAS's own threads spin for a while after each product they share,
    and then take the second core from the workers (MNIST CNN graph step, 2 cores,
    load 1.5: 55.9 ms median with BLAS on two threads between kernels, 36.4 ms on
    one; bench/README.md).

    With one worker BLAS is held to one thread too: OpenBLAS's bits can depend on its
    thread count (its Haswell kernels, on AMD Zen 3: a (32, 300) @ (300, 90) product
    differs in the last bit on one thread and on two), so every product of a step runs
    on one BLAS thread whatever the worker count, and one worker and two give the same
    bits."""
    placed = _caller_placed() if worker_count() >= 2 else contextlib.nullcontext()
    with blas_threads.limit(1), placed:
        yield


_placed_threads: set = set()  # threads kept off the pool's CPUs by an open _caller_placed()


@contextlib.contextmanager
def _caller_placed() -> Iterator[None]:
    """Keep the calling thread off the pool's CPUs (:func:`_off_pool_cpus`) for a whole
    block of kernel calls, so the calls inside need no move of their own: two
    ``sched_setaffinity`` calls per split kernel were about 3 % of a ResNet-20 graph
    step (about 240 kernels a step; ResNet-20 graph step 255.0 against 262.8 ms median, CPU 426.5
    against 437.9 ms, ResNet-8 105.6 against 110.3 ms, alternating blocks, load 0.5-0.9)."""
    me = threading.get_ident()
    if me in _placed_threads or not _caller_cpus:
        yield
        return
    with _off_pool_cpus():
        _placed_threads.add(me)
        try:
            yield
        finally:
            _placed_threads.discard(me)


def _placement(workers: int) -> tuple[list[int], frozenset[int]] | None:
    """``(pool CPUs, caller CPUs)``: the CPUs the ``workers - 1`` pool threads are
    pinned to, one each (the last of this process's), and those left to the calling
    thread; None when nothing is pinned: fewer workers than CPUs, no
    ``sched_setaffinity`` on this platform, or a BLAS that cannot be held to one thread
    (no threadpoolctl). Then OpenBLAS's own threads share the CPUs with the pieces, and
    pinned threads could not get out of their way: ``singa-train``'s default run took
    140 s pinned against 26 s unpinned without threadpoolctl."""
    if not hasattr(os, "sched_setaffinity") or blas_threads.controller() is None:
        return None
    cpus = sorted(_own_cpus())
    if workers < 2 or len(cpus) != workers:
        return None
    return cpus[1:], frozenset(cpus[:1])


def _pin_to_next(cpus: Iterator[int]) -> None:
    """Pin the calling pool thread to the next of ``cpus`` (left unpinned if the
    system refuses)."""
    cpu = next(cpus, None)
    if cpu is not None:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {cpu})


class _ExecutorPool:
    """The pool where :mod:`singa.kernels.spin_pool` cannot run (no futex call): a
    ``ThreadPoolExecutor`` with :class:`~singa.kernels.spin_pool.SpinPool`'s methods."""

    def __init__(self, count: int, cpus: list[int] | None):
        pin = {"initializer": _pin_to_next, "initargs": (iter(cpus),)} if cpus else {}
        self._executor = ThreadPoolExecutor(max_workers=count, thread_name_prefix=_THREAD_PREFIX, **pin)

    def start(self, job: Callable[[], Any], count: int) -> list:
        return [self._executor.submit(job) for _ in range(count)]

    @staticmethod
    def join(started: list) -> None:
        for f in started:  # one that has not started has no piece left to take
            if not f.cancel():
                f.result()

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)


def _new_pool(workers: int) -> Any:
    """The pool of ``workers - 1`` threads, pinned as :func:`_placement` says: a
    :class:`~singa.kernels.spin_pool.SpinPool` where the futex call is known, else
    :class:`_ExecutorPool`."""
    placement = _placement(workers)
    _caller_cpus.clear()
    if placement is not None:
        _caller_cpus.append(placement[1])
    cpus = placement[0] if placement is not None else None
    if futex_available():
        from singa.kernels.spin_pool import SpinPool

        return SpinPool(workers - 1, _THREAD_PREFIX, cpus)
    return _ExecutorPool(workers - 1, cpus)


def futex_available() -> bool:
    """Whether the pool threads can wait on a futex (Linux on x86-64 or AArch64)."""
    return sys.platform.startswith("linux") and platform.machine() in ("x86_64", "aarch64")


#: seconds between two readings of the load average by :func:`_others_busy`
LOAD_CHECK_S = 1.0
_load_seen: list = [-LOAD_CHECK_S, False]  # [monotonic time of the last reading, busy]


def _others_busy() -> bool:
    """Whether the machine's 1-minute load average is above the worker count, so other
    processes compete for the CPUs (read at most once per :data:`LOAD_CHECK_S`)."""
    now = time.monotonic()
    if now - _load_seen[0] >= LOAD_CHECK_S:
        try:
            busy = os.getloadavg()[0] > worker_count()
        except (AttributeError, OSError):  # no load average on this platform
            busy = False
        _load_seen[:] = [now, busy]
    return _load_seen[1]


@contextlib.contextmanager
def _off_pool_cpus() -> Iterator[None]:
    """Keep the calling thread on the CPUs left to it by a pinned pool for the block,
    then give it back its own CPU mask (unchanged when that mask has none of them).
    Not while other processes keep the machine busy (:func:`_others_busy`): a move onto
    a CPU that another process holds waits for it (``gpt`` graph training step, two
    workers, load 2.4-2.9 on 2 cores: medians 380-509 ms moving the caller, 296-345 ms
    not; bench/README.md), while the pool threads stay pinned."""
    if threading.get_ident() in _placed_threads:  # the whole block is placed already
        yield
        return
    mask = os.sched_getaffinity(0) if _caller_cpus and not _others_busy() else None
    keep = mask & _caller_cpus[0] if mask is not None else None
    if not keep or keep == mask:
        yield
        return
    try:
        os.sched_setaffinity(0, keep)
    except OSError:
        mask = None  # refused: run where the thread is
    me = threading.get_ident()
    if mask is not None:
        _home_masks[me] = mask
    try:
        yield
    finally:
        if mask is not None:
            _home_masks.pop(me, None)
            os.sched_setaffinity(0, mask)


def _take_pieces(fn: Callable[..., Any], pieces: Sequence[Any], results: list, ticket: Any) -> None:
    """Run the pieces whose numbers ``ticket`` hands out until none is left, keeping
    ``(True, result)`` or ``(False, exception)`` at each piece's place."""
    for i in ticket:
        if i >= len(pieces):
            return
        try:
            results[i] = (True, fn(*pieces[i]))
        except BaseException as e:  # raised in the caller, in piece order
            results[i] = (False, e)


def run_pieces(fn: Callable[..., Any], pieces: Sequence[Any], xp: Any = np) -> list:
    """``[fn(*p) for p in pieces]``, the calls spread over :func:`worker_count`
    threads (the calling one and ``worker_count() - 1`` pool threads, each taking the
    next piece when it is free) with BLAS on one thread each while they run (numpy
    only: with cupy or one piece, the calls run inline in order; with one worker,
    inline in order with BLAS on one thread, the same bits). The
    results come back in piece order; an exception in a piece is raised here after
    every piece has ended. A pool thread that has not started when every piece is
    taken is not waited for. The pool serves one call at a time: a call made while it
    is in use (from a piece, or from another thread) runs its pieces inline."""
    workers, lock = worker_count(), _in_use[0]
    if xp is not np or len(pieces) < 2:
        return [fn(*p) for p in pieces]
    if workers < 2:
        with blas_threads.limit(1):  # a piece's products on one BLAS thread, as on the pool
            return [fn(*p) for p in pieces]
    if not lock.acquire(blocking=False):
        return [fn(*p) for p in pieces]
    try:
        if not _pool:
            _pool.append(_new_pool(workers))
        results: list = [None] * len(pieces)
        ticket = itertools.count()  # next() on it is atomic under the GIL
        with blas_threads.limit(1), _off_pool_cpus():
            pool, helpers = _pool[0], min(workers, len(pieces)) - 1
            started = pool.start(lambda: _take_pieces(fn, pieces, results, ticket), helpers)
            _take_pieces(fn, pieces, results, ticket)
            pool.join(started)
    finally:
        lock.release()
    for ok, value in results:
        if not ok:
            raise value
    return [value for _, value in results]


#: elements read and written per piece below which :func:`work_pieces` does not split:
#: about 50 us of a memory-bound pass, the order of the pool's hand-off
PIECE_WORK = 1 << 19
#: at most this many pieces per kernel (a few more than two cores, so that a core slowed
#: by other work takes fewer)
MAX_PIECES = 4


def work_pieces(n: int, work: int) -> list[tuple[int, int]]:
    """``range(n)`` cut into pieces for a kernel touching ``work`` elements in all:
    one piece per :data:`PIECE_WORK` elements, at most :data:`MAX_PIECES`. Depends on
    the sizes only, never on the worker count."""
    return even_pieces(n, max(1, min(MAX_PIECES, work // PIECE_WORK)))


def _same_layout_flats(out: Any, arrays: tuple) -> list | None:
    """1-D views of ``arrays`` and then ``out``, in memory order, when ``out`` is dense
    and every array is laid out as it is (C order, or ``out``'s strides); else None."""
    if out.flags.c_contiguous and all(a.shape == out.shape and a.flags.c_contiguous for a in arrays):
        return [a.reshape(-1) for a in (*arrays, out)]
    if not all(a.shape == out.shape and a.strides == out.strides for a in arrays):
        return None
    o = _memory_flat(out)
    return None if o is None else [*(_memory_flat(a) for a in arrays), o]


def _memory_flat(a: Any) -> Any:
    """A 1-D view of ``a``'s elements in memory order, or None when ``a`` is not dense."""
    t = a.transpose(sorted(range(a.ndim), key=lambda i: -a.strides[i]))
    return t.reshape(-1) if t.flags.c_contiguous else None


def _flat_like(a: Any, like: Any) -> Any:
    """``a``'s elements as a 1-D array in the memory order of the dense array ``like``
    (a view when ``a`` is laid out as ``like``, else a copy)."""
    f = _memory_flat(a) if a.strides == like.strides else None
    if f is None:
        f = np.empty_like(like, dtype=a.dtype)
        np.copyto(f, a)
        f = _memory_flat(f)
    return f


def run_flat(fn: Callable[..., Any], out: Any, *arrays: Any) -> None:
    """An elementwise kernel over pieces of memory: ``fn(*pieces, out_piece)`` on 1-D
    pieces of numpy ``arrays`` and ``out`` (all of ``out``'s shape) in ``out``'s memory
    order, on the worker threads (:func:`work_pieces`, two elements touched per
    element). An input laid out otherwise is copied into that order first; an ``out``
    that is not dense is computed through a dense copy of it (so a kernel may also read
    ``out``: an in-place one)."""
    same = _same_layout_flats(out, arrays)
    if same is not None:  # the common case: no copies, ~2 us
        o, dense, flats = same[-1], out, same[:-1]
    else:
        o = _memory_flat(out)
        if o is None:
            dense = np.empty_like(out)
            np.copyto(dense, out)
            o = _memory_flat(dense)
        else:
            dense = out
        flats = [_flat_like(a, dense) for a in arrays]
    if o.size < PIECE_WORK:  # one piece (work_pieces counts 2 * size): call it here
        fn(*flats, o)
    else:
        run_pieces(lambda i, j: fn(*[f[i:j] for f in flats], o[i:j]), work_pieces(o.size, 2 * o.size))
    if dense is not out:
        np.copyto(out, dense)
