"""SHA-256 of array data on worker threads (hashlib releases the GIL), shared by the
zip reader and writer of :mod:`singa.checkpoint`."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

CHUNK = 8 << 20  # bytes per write: few Python-level steps, still in L3 between the two CRC-32s and the copy
HASH_INLINE = 1 << 20  # smaller arrays are hashed on the calling thread
HASH_WORKERS = max(1, min(2, (os.cpu_count() or 1) - 1))  # the calling thread keeps a core


def memory_bytes(arr: np.ndarray) -> np.ndarray:
    """The bytes of a C- or Fortran-contiguous array in memory order (a view), i.e. the
    data of its ``.npy`` member."""
    return arr.ravel(order="K").view(np.uint8)


def sha256_hex(data: bytes) -> str:
    """The SHA-256 hex digest of ``data``."""
    return hashlib.sha256(data).hexdigest()


def _sha256(header: bytes, data: np.ndarray) -> str:
    h = hashlib.sha256(header)
    h.update(data)
    return h.hexdigest()


def submit(pool: ThreadPoolExecutor, fn: Callable, *args: Any) -> Future:
    """``pool.submit(fn, *args)``, or ``fn`` run here when the pool takes no more work
    (at interpreter shutdown, e.g. a save from an ``atexit`` handler)."""
    try:
        return pool.submit(fn, *args)
    except RuntimeError:
        done: Future = Future()
        try:
            done.set_result(fn(*args))
        except Exception as e:
            done.set_exception(e)
        return done


def hash_member(pool: ThreadPoolExecutor, header: bytes, data: np.ndarray) -> Future | str:
    """The SHA-256 of a ``.npy`` member (``header`` then ``data``): computed here for a
    small array, else a Future computed on ``pool``."""
    return _sha256(header, data) if data.nbytes < HASH_INLINE else submit(pool, _sha256, header, data)


def resolved(digest: Future | str | None) -> str | None:
    """The digest itself, waiting for it if it is still being computed."""
    return digest.result() if isinstance(digest, Future) else digest
