"""Compiled CPU kernels: numba, imported and run on first use.

A few memory-bound loops (max-pool backward, the SGD update) are written as plain
Python loops over numpy arrays and compiled by numba: one pass over memory where numpy
needs several, each with its temporaries. :func:`kernel` wraps such a function; the
first call imports numba (about half a second) and compiles the function for the
argument types (about a second per set of types), or loads it from numba's disk cache
(``__pycache__`` beside the module, or ``NUMBA_CACHE_DIR``). Kernels release the GIL,
so batch slices may run on several threads (``_im2col.split_batch``). numba has no
float16 on the CPU: callers compute float16 arrays in float32.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["kernel"]


def kernel(fn: Callable) -> Callable:
    """``fn`` compiled by numba (no GIL, cached on disk) when first called."""
    compiled: list = []

    def call(*args: Any) -> Any:
        if not compiled:
            from numba import njit

            compiled.append(njit(nogil=True, cache=True)(fn))
        return compiled[0](*args)

    call.__doc__ = fn.__doc__
    call.__name__ = fn.__name__
    call.__wrapped__ = fn
    return call
