"""Compiled CPU kernels: numba, imported and run on first use.

A few memory-bound loops (max-pool backward, the SGD update) are written as plain
Python loops over numpy arrays and compiled by numba: one pass over memory where numpy
needs several, each with its temporaries. :func:`kernel` wraps such a function; the
first call imports numba (about half a second) and compiles the function for the
argument types (about a second per set of types), or loads it from numba's disk cache.
That cache lives in the per-user cache folder (:func:`kernel_cache_dir`:
``NUMBA_CACHE_DIR`` when set, else ``numba`` below :func:`singa.user_cache.user_cache_dir`),
never beside the installed package: files there outlive ``pip uninstall`` and leave a
``singa`` folder that shadows the next install. Kernels release the GIL,
so batch slices may run on several threads (``im2col.split_batch``). numba has no
float16 on the CPU: callers compute float16 arrays in float32. Division follows numpy
(``x / 0`` is inf or nan, never ``ZeroDivisionError``): Python's check is a branch in
every loop that divides, and it keeps LLVM from vectorising the loop.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from singa.user_cache import user_cache_dir

__all__ = ["kernel", "helper", "FLOAT_DTYPES", "takes_floats", "kernel_cache_dir"]

#: the float dtypes the compiled kernels take (numba has no float16 on the CPU)
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def takes_floats(*arrays: Any) -> bool:
    """Whether every one of ``arrays`` is a numpy array of one dtype in
    :data:`FLOAT_DTYPES`, as the float kernels need (cupy and float16 arrays take the
    operators' array expressions instead)."""
    dtype = arrays[0].dtype
    return dtype in FLOAT_DTYPES and all(type(a) is np.ndarray and a.dtype == dtype for a in arrays)


_helpers: list = []  # functions that kernels call, compiled into them
_registered: list = []


def helper(fn: Callable) -> Callable:
    """Mark ``fn`` as a function that kernels call: it is compiled into each kernel
    that calls it (registered with numba before the next kernel compiles), and stays
    a plain Python function otherwise. numba's disk cache checks only the calling
    kernel's own file, so keep a helper in the file of the kernels that call it."""
    _helpers.append(fn)
    return fn


def _register_helpers() -> None:
    from numba.extending import register_jitable

    for fn in _helpers[len(_registered) :]:
        register_jitable(fn)
        _registered.append(fn)


def kernel_cache_dir() -> Path:
    """Where the compiled kernels are cached: ``$NUMBA_CACHE_DIR`` when set, else
    ``numba`` below singa's per-user cache folder (``~/.cache/singa/numba`` on Linux)."""
    env = os.environ.get("NUMBA_CACHE_DIR")
    return Path(env).expanduser() if env else user_cache_dir("numba")


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK)


@contextmanager
def _numba_cache_in(folder: Path) -> Iterator[None]:
    """numba's cache folder set to ``folder`` while a kernel is declared (numba fixes a
    function's cache path when ``njit(cache=True)`` wraps it), then put back, so that the
    caller's own numba functions keep numba's settings."""
    from numba import config

    before = config.CACHE_DIR
    config.CACHE_DIR = str(folder)
    try:
        yield
    finally:
        config.CACHE_DIR = before


def _compile(fn: Callable, reassociate: bool, release_gil: bool = True, fused: bool = False) -> Callable:
    from numba import njit

    _register_helpers()
    options: dict[str, Any] = {"nogil": release_gil, "error_model": "numpy"}
    if reassociate:
        options["fastmath"] = {"reassoc", "nsz", "contract"}
    elif fused:
        options["fastmath"] = {"contract"}
    folder = kernel_cache_dir()
    if not _writable(folder):  # no cache rather than one beside the package
        return njit(**options)(fn)
    with _numba_cache_in(folder):
        return njit(cache=True, **options)(fn)


def kernel(
    fn: Callable | None = None, *, reassociate: bool = False, release_gil: bool = True, fused: bool = False
) -> Any:
    """``fn`` compiled by numba (no GIL, cached in :func:`kernel_cache_dir`) when first
    called. ``@kernel(reassociate=True)`` lets LLVM reorder float additions, so that a
    sum along a row runs in vector lanes (a plain loop adds one element at a time, 4
    cycles apart): the sum's rounding changes, the same way on every run.
    ``@kernel(release_gil=False)`` keeps the GIL through the call, for a call of a
    microsecond after which the caller goes on in Python (releasing the GIL lets a
    waiting thread take it, and the caller then waits for it to come back).
    ``@kernel(fused=True)`` lets LLVM fuse a multiply and the add after it into one
    instruction with one rounding (``reassociate`` implies it): polynomials take half
    the instructions, and their last bit changes, the same way on every run."""
    if fn is None:
        return lambda f: kernel(f, reassociate=reassociate, release_gil=release_gil, fused=fused)
    compiled: list = []

    def call(*args: Any) -> Any:
        if not compiled:
            compiled.append(_compile(fn, reassociate, release_gil, fused))
        return compiled[0](*args)

    call.__doc__ = fn.__doc__
    call.__name__ = fn.__name__
    call.__wrapped__ = fn
    return call
