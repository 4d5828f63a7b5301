"""In-place execution for scheduled graph replays (``sequential=False``).

A replay knows when a buffer is dead: its slot has no later use. When, in addition,
nothing else refers to the array (no operator cache, no view, no returned Tensor:
checked with reference counts at run time), a kernel may write its result into it
instead of allocating a new array. Elementwise results do not depend on where they
are written, so the values stay bitwise the same as eager execution.

Three uses:

- gradient sums (the engine's ``a + b``) accumulate into ``a``;
- optimizer updates (recorded as :class:`~singa.autograd.engine.DonatingUpdate`)
  get the gradient as scratch space (``donate``);
- a few elementwise operators declare in-place variants (their class attributes
  ``forward_inplace`` / ``backward_inplace``, see :class:`~singa.autograd.engine.Operation`).
  Each variant is checked while tracing: it is run on a copy of the traced inputs
  and used only if its output (bits, shape, dtype, strides) and the cache it leaves
  for backward equal the operator's own. A variant whose check fails is not used
  (a test runs every declared variant through this check, so none fails unnoticed).

Ownership is decided by :func:`singa.kernels.buffers.owns` (the one reference-count
rule shared with the operators' buffer pool).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from singa.autograd.engine import DonatingUpdate
from singa.device import array_module
from singa.kernels import adds
from singa.kernels.buffers import owns

__all__ = ["add_into", "donating", "find_variants", "inplace_call"]


def add_into(a: Any, b: Any) -> Any:
    """``a + b`` (the engine's gradient sum), computed into ``a`` when the generated
    code passes a dead ``a`` that nothing else holds."""
    n = sys.getrefcount(a)  # before ``a`` is pushed as another call's argument
    if a.shape == b.shape and a.dtype == b.dtype and owns(a, n):
        if not adds.add(a, b, a):
            a += b
        return a
    return adds.added(a, b)


def donating(fn: DonatingUpdate) -> Callable:
    """Wrap an optimizer update ``fn(p, g, donate=...)`` so that ``g`` is donated when
    the generated code passes a dead gradient that nothing else holds."""
    if not isinstance(fn, DonatingUpdate):
        raise TypeError(f"donating: expected a DonatingUpdate, got {type(fn).__name__}")

    def call(p: Any, g: Any) -> Any:
        n = sys.getrefcount(g)  # before ``g`` is pushed as another call's argument
        return fn(p, g, donate=owns(g, n))

    return call


# ----- in-place variants of operators ---------------------------------------------------
def _host(a: Any) -> np.ndarray:
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else a


def _same_bits(a: Any, b: Any) -> bool:
    if not (hasattr(a, "strides") and hasattr(b, "strides")):  # not arrays (np.dtype has a shape)
        return a == b if not isinstance(a, tuple | list) else _same_cache(a, b)
    if a.shape != b.shape or a.dtype != b.dtype or a.strides != b.strides:
        return False
    ha, hb = np.ascontiguousarray(_host(a)), np.ascontiguousarray(_host(b))
    return ha.tobytes() == hb.tobytes()


def _same_cache(a: Any, b: Any) -> bool:
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(_same_cache(x, y) for x, y in zip(a, b))
    if a is None or b is None:
        return a is b
    try:
        return bool(_same_bits(a, b))
    except Exception:
        return False


def find_variants(op: Any, is_backward: bool, ins: list, outs: tuple) -> list:
    """The in-place variants of this traced kernel whose check passes, as
    [(variant, donor input index)]. Called by the recorder right after the kernel
    ran (so a backward's ``op.cache`` is still there)."""
    cands = op.backward_inplace if is_backward else op.forward_inplace
    if not cands or len(outs) != 1 or outs[0] is None:
        return []
    out = outs[0]
    good = []
    for variant, k in cands:
        if k >= len(ins) or ins[k] is None:
            continue
        x = ins[k]
        if not hasattr(x, "flags") or x.shape != out.shape or x.dtype != out.dtype:
            continue
        copy = array_module(x).empty_like(x)
        if copy.strides != x.strides:  # not dense: the copy would lay out differently
            continue
        copy[...] = x
        args = list(ins)
        args[k] = copy
        saved = op.cache
        try:
            res = variant(op, *args)
            ok = res is copy and _same_bits(res, out)
            if ok and not is_backward:
                ok = _same_cache(op.cache, _swap(saved, out, copy))
        except Exception:
            ok = False
        finally:
            op.cache = saved
        if ok:
            good.append((variant, k))
    return good


def _swap(cache: Any, out: Any, copy: Any) -> Any:
    """The operator's cache with its output array replaced by the variant's (which is
    the in-place buffer), for comparison."""
    if cache is out:
        return copy
    if isinstance(cache, tuple | list):
        return type(cache)(_swap(c, out, copy) for c in cache)
    return cache


def inplace_call(variant: Callable, op: Any, fn: Callable, donor: int, nargs: int) -> Callable:
    """A kernel call for generated code: ``variant`` writes into input ``donor`` when
    that array is held by nothing but the generated local; otherwise ``fn`` runs."""
    if nargs == 1:

        def call1(a: Any) -> Any:
            n = sys.getrefcount(a)
            if owns(a, n):
                return variant(op, a)
            return fn(a)

        return call1
    if nargs == 2 and donor == 0:

        def call2a(a: Any, b: Any) -> Any:
            n = sys.getrefcount(a)
            if owns(a, n):
                return variant(op, a, b)
            return fn(a, b)

        return call2a
    if nargs == 2 and donor == 1:

        def call2b(a: Any, b: Any) -> Any:
            n = sys.getrefcount(b)
            if owns(b, n):
                return variant(op, a, b)
            return fn(a, b)

        return call2b
    raise ValueError(f"inplace_call: unsupported arity {nargs} / donor {donor}")
