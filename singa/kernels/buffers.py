"""Buffer ownership: when may a kernel write into an array it did not allocate?

One rule serves two users: the array is held by nothing that could see the write.
CPython's reference count tells that exactly (any variable, container, Tensor, cache
entry or numpy view holding the array keeps the count up), so both users count
references, against baselines measured once at import (:func:`_calibrate`), since
interpreters differ in how many references a call or a loop holds itself.

- The operators' **buffer pool** (:func:`scratch`): convolution and pooling take their
  large arrays (padded inputs, column matrices, outputs, gradients) from a pool
  instead of allocating them afresh on every call (glibc returns big freed blocks to
  the OS and page-faults them in again on the next step). A pooled array is handed
  out again only when nothing but the pool's list refers to it, so it may be cached
  for backward or returned to the caller like any new array. Only numpy arrays are
  pooled (cupy has its own memory pool). The pool keeps at most ``_PER_KEY`` arrays
  per (shape, dtype) and about ``_POOL_BYTES`` in all, forgetting the least recently
  used shapes first (arrays in use stay valid; the pool just stops tracking them).
- **Graph replay's in-place kernels** (:func:`owns`): a dead buffer that only the
  generated code's local holds (plus, for a pooled array, the pool) may be reused.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

__all__ = [
    "scratch",
    "scratch_like",
    "pooled_out",
    "POOLED_OUT_BYTES",
    "is_pooled",
    "clear_scratch",
    "owns",
    "HELPER_REFS",
]


# ----- reference-count baselines ------------------------------------------------------------
def _first_free(lst: list, free_refs: int) -> Any:
    for a in lst:
        if sys.getrefcount(a) <= free_refs:
            return a
    return None


def _probe(a: Any) -> int:
    return sys.getrefcount(a)


def _probe_base(a: Any) -> int:
    return sys.getrefcount(a.base)


def _calibrate() -> tuple[int, int, int]:
    """The reference counts seen (1) by :func:`_first_free` for an array held only by
    its list, (2) inside a helper called from generated code as ``helper(v)`` when only
    the local ``v`` holds the array and (3) there for the base of a view ``v`` that is
    the only holder of its base."""
    probe = [np.empty(1)]
    free = next((k for k in range(2, 8) if _first_free(probe, k) is not None), None)
    if free is None:
        raise RuntimeError("cannot calibrate the buffer pool's reference counts")
    ns: dict = {"_probe": _probe, "_probe_base": _probe_base}
    exec("def f(v):\n    return _probe(v)\ndef g(v):\n    return _probe_base(v)\n", ns)
    return free, ns["f"](np.empty(3)), ns["g"](np.empty(4)[1:])


_FREE_REFS, HELPER_REFS, _HELPER_BASE_REFS = _calibrate()


# ----- the pool ----------------------------------------------------------------------------------
_POOL_BYTES = 256 * 1024 * 1024
_PER_KEY = 4
_pool: OrderedDict = OrderedDict()
_pool_bytes = 0
_pool_lock = threading.Lock()


def scratch(xp: Any, shape: tuple, dtype: Any) -> Any:
    """An uninitialised array of ``shape``/``dtype`` from the pool (numpy; a plain
    ``xp.empty`` otherwise). It is never handed out again while anything but the pool
    refers to it, so it may be cached or returned like any new array."""
    if xp is not np:
        return xp.empty(shape, dtype=dtype)
    with _pool_lock:
        return _scratch(shape, np.dtype(dtype))


def _scratch(shape: tuple, dtype: Any) -> Any:
    global _pool_bytes
    key = (tuple(shape), dtype.str)
    lst = _pool.get(key)
    if lst is not None:
        _pool.move_to_end(key)
        a = _first_free(lst, _FREE_REFS)
        if a is not None:
            return a
        if len(lst) >= _PER_KEY:
            return np.empty(shape, dtype=dtype)
    else:
        lst = _pool[key] = []
    a = np.empty(shape, dtype=dtype)
    lst.append(a)
    _pool_bytes += a.nbytes
    while _pool_bytes > _POOL_BYTES and len(_pool) > 1:
        _, old = _pool.popitem(last=False)
        _pool_bytes -= sum(b.nbytes for b in old)
    return a


def scratch_like(xp: Any, a: Any, dtype: Any = None) -> Any:
    """An uninitialised pooled array (see :func:`scratch`) of ``a``'s shape and
    ``dtype`` (default ``a``'s), with ``a``'s memory layout when ``a`` is dense in some
    axis order (an NCHW array with NHWC memory stays so), else C order. Elementwise
    operators take their outputs from here so that large ones are not page-faulted in
    afresh on every step."""
    dtype = a.dtype if dtype is None else dtype
    if xp is not np or a.ndim < 2 or a.flags.c_contiguous:
        return scratch(xp, a.shape, dtype)
    order = sorted(range(a.ndim), key=lambda i: -a.strides[i])
    dense = a.transpose(order)
    if not dense.flags.c_contiguous:
        return scratch(xp, a.shape, dtype)
    back = sorted(range(a.ndim), key=order.__getitem__)
    return scratch(xp, dense.shape, dtype).transpose(back)


#: results at least this large come from the pool in :func:`pooled_out` (glibc serves
#: smaller blocks from its heap without page faults, and faster than the pool)
POOLED_OUT_BYTES = 1 << 18


def pooled_out(xp: Any, a: Any, dtype: Any = None) -> Any:
    """The ``out=`` argument for an elementwise result shaped like ``a``: a pooled
    array in ``a``'s layout (:func:`scratch_like`) when it is a large numpy array,
    else None (the ufunc allocates)."""
    if xp is not np:
        return None
    dtype = a.dtype if dtype is None else np.dtype(dtype)
    if a.size * dtype.itemsize < POOLED_OUT_BYTES:
        return None
    return scratch_like(xp, a, dtype)


def is_pooled(a: Any) -> bool:
    """Whether array ``a`` belongs to the pool (whose list then holds one reference
    to it)."""
    if not isinstance(a, np.ndarray):
        return False
    with _pool_lock:
        lst = _pool.get((a.shape, a.dtype.str))
        return lst is not None and any(x is a for x in lst)


def clear_scratch() -> None:
    """Drop every pooled array (arrays still in use stay valid)."""
    global _pool_bytes
    with _pool_lock:
        _pool.clear()
        _pool_bytes = 0


# ----- exclusive ownership -----------------------------------------------------------------------
def owns(a: Any, refs: int) -> bool:
    """Whether writing into ``a`` can affect nothing else. ``refs`` is the reference
    count of ``a`` seen by a helper called as ``helper(v)`` from generated code (the
    local ``v`` counts as one; compare :data:`HELPER_REFS`). True when ``a`` is
    writeable and held by that local only, and owns its memory or is the only view of
    its base (one more reference is allowed from the buffer pool)."""
    extra = refs - HELPER_REFS
    if extra < 0 or extra > 1 or not getattr(a.flags, "writeable", True):
        return False
    if a.base is None:
        return extra == 0 or is_pooled(a)
    if extra or a.base.base is not None:
        return False
    n = sys.getrefcount(a.base)
    return n == _HELPER_BASE_REFS or (n == _HELPER_BASE_REFS + 1 and is_pooled(a.base))
