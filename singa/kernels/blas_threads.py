"""How many threads numpy's BLAS may use for one matrix product.

OpenBLAS splits a product over all its threads once it has more than about 2**18
multiply-adds. For skinny products, whose result has a side of a few dozen (a
convolution's weight gradient: (C*kh*kw, N*OH*OW) @ (N*OH*OW, O); a classifier's
(N, 500) @ (500, 10)), each thread gets a sliver of the result and a long inner
dimension, and handing the work over costs more than the second core gives: under load
the first convolution's weight gradient of the MNIST CNN took 43% of a step on two
threads (``bench/README.md``). :func:`product_threads` runs such a product on one
thread and leaves every other product to BLAS's own setting.

The thread count is process-wide state of the BLAS library (set through threadpoolctl,
2-3 microseconds a call), so the limit holds for products other threads start in the
meantime too; it is restored on exit. Only a numpy product is ever limited (cupy's
products run on the GPU), and only when threadpoolctl finds numpy's OpenBLAS (or
another BLAS it can control).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = [
    "matmul",
    "product_threads",
    "threads_for",
    "limit",
    "controller",
    "configured_threads",
    "SKINNY_SIDE",
    "MIN_LIMITED_WORK",
]

#: a product whose result has a side at most this long is skinny
SKINNY_SIDE = 32
#: below this many multiply-adds BLAS runs on one thread by itself (OpenBLAS: 2**18)
#: or the product is too short for a thread-count switch to pay
MIN_LIMITED_WORK = 1 << 20

_blas: list = []  # [controller or None], found on first use
_configured: list = []  # the thread counts that the open limit() blocks replaced
_held: list = []  # the thread counts those blocks set


def _numpys_own(libs: list) -> Any:
    """The controller of the BLAS that numpy's wheel bundles (a path under numpy's
    folder or ``numpy.libs``) when one is loaded, else the first one (a numpy built
    against the system's BLAS), else None: another package's BLAS loaded first
    (scipy's) must not be the one limited."""
    for lib in libs:
        if "/numpy" in str(lib.filepath).replace("\\", "/"):
            return lib
    return libs[0] if libs else None


def controller() -> Any:
    """threadpoolctl's controller of numpy's BLAS, or None (no threadpoolctl, or no
    BLAS it can control)."""
    if not _blas:
        ctl = None
        try:
            from threadpoolctl import ThreadpoolController

            libs = ThreadpoolController().select(user_api="blas").lib_controllers
            ctl = _numpys_own(libs)
        except Exception:  # no threadpoolctl, or it cannot read the libraries: leave BLAS alone
            ctl = None
        _blas.append(ctl)
    return _blas[0]


def threads_for(m: int, n: int, k: int) -> int | None:
    """The thread count for an (m, k) @ (k, n) product: 1 when it is skinny (a side
    of the result at most :data:`SKINNY_SIDE`) and has at least
    :data:`MIN_LIMITED_WORK` multiply-adds, else None (BLAS's own setting)."""
    if min(m, n) <= SKINNY_SIDE and m * n * k >= MIN_LIMITED_WORK:
        return 1
    return None


@contextlib.contextmanager
def product_threads(xp: Any, m: int, n: int, k: int) -> Iterator[None]:
    """Run the (m, k) @ (k, n) products in the ``with`` block on the threads
    :func:`threads_for` gives (numpy only; nothing changes otherwise)."""
    want = threads_for(m, n, k) if xp is np else None
    if want is None:
        yield
        return
    with limit(want):
        yield


@contextlib.contextmanager
def limit(threads: int) -> Iterator[None]:
    """Run numpy's BLAS on at most ``threads`` threads in the ``with`` block (process-
    wide; restored on exit; nothing happens without a controllable BLAS). Inside an
    open block of at most ``threads`` threads it does nothing, without asking BLAS
    (threadpoolctl's query costs about 5 us, and a batch-1 ResNet-20 inference opens
    about 20 such nested blocks)."""
    if _held and _held[-1] <= threads:
        yield
        return
    ctl = controller()
    before = ctl.get_num_threads() if ctl is not None else None
    if before is None or before <= threads:
        yield
        return
    ctl.set_num_threads(threads)
    _configured.append(before)
    _held.append(threads)
    try:
        yield
    finally:
        _held.pop()
        _configured.pop()
        ctl.set_num_threads(before)


def configured_threads() -> int | None:
    """BLAS's thread count outside any :func:`limit` block (None without a
    controllable BLAS)."""
    if _configured:
        return _configured[0]
    ctl = controller()
    return ctl.get_num_threads() if ctl is not None else None


def matmul(a: Any, b: Any, out: Any = None) -> Any:
    """``a @ b`` (into ``out`` when given) on the threads :func:`threads_for` gives
    for the shapes of its matrices (the last two axes; a 1-D operand is a row or a
    column as in numpy)."""
    m = a.shape[-2] if a.ndim > 1 else 1
    n = b.shape[-1] if b.ndim > 1 else 1
    if threads_for(m, n, a.shape[-1]) is None or not isinstance(a, np.ndarray):
        return np.matmul(a, b, out=out) if out is not None else a @ b
    with product_threads(np, m, n, a.shape[-1]):
        return np.matmul(a, b, out=out) if out is not None else a @ b
