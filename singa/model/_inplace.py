"""In-place execution for scheduled graph replays (``sequential=False``).

A replay knows when a buffer is dead: its slot has no later use. When, in addition,
nothing else refers to the array (no operator cache, no view, no returned Tensor:
checked with reference counts at run time), a kernel may write its result into it
instead of allocating a new array. Elementwise results do not depend on where they
are written, so the values stay bitwise the same as eager execution.

Three uses:

- gradient sums (the engine's ``a + b``) accumulate into ``a``;
- optimizer updates get the gradient as scratch space (``donate``);
- a few elementwise operators have in-place variants (:data:`VARIANTS`). Each variant
  is checked while tracing: it is run on a copy of the traced inputs and used only if
  its output (bits, shape, dtype, strides) and the cache it leaves for backward equal
  the operator's own. A variant whose check fails is simply not used.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from singa.autograd import _im2col
from singa.autograd.engine import array_module

__all__ = ["add_into", "donating", "find_variants", "inplace_call"]


# ----- exclusive ownership -----------------------------------------------------------------
def _probe(a: Any) -> int:
    return sys.getrefcount(a)


def _probe_base(a: Any) -> int:
    return sys.getrefcount(a.base)


def _calibrate() -> tuple[int, int]:
    """Reference counts seen inside a helper called from generated code as
    ``helper(v)`` when only the local ``v`` holds the array (and, for a view, when
    the view is the only holder of its base)."""
    ns: dict = {"_probe": _probe, "_probe_base": _probe_base}
    exec("def f(v):\n    return _probe(v)\ndef g(v):\n    return _probe_base(v)\n", ns)
    return ns["f"](np.empty(3)), ns["g"](np.empty(4)[1:])


REFS, BASE_REFS = _calibrate()


def _pooled(b: Any) -> bool:
    """Whether array ``b`` belongs to the operators' buffer pool
    (:func:`singa.autograd._im2col.scratch`), whose list holds one reference to it.
    The pool hands an array out again only when nothing else refers to it, so a
    buffer in use by the replay is as private as an unpooled one."""
    return _im2col.is_pooled(b)


def owns(a: Any, refs: int) -> bool:
    """Whether writing into ``a`` can affect nothing else. ``refs`` is the reference
    count of ``a`` seen by a helper called as ``helper(v)`` from generated code (the
    local ``v`` counts as one). True when ``a`` is writeable and held by that local
    only, and owns its memory or is the only view of its base (one more reference
    is allowed from the buffer pool)."""
    extra = refs - REFS
    if extra < 0 or extra > 1 or not getattr(a.flags, "writeable", True):
        return False
    if a.base is None:
        return extra == 0 or _pooled(a)
    if extra or a.base.base is not None:
        return False
    n = sys.getrefcount(a.base)
    return n == BASE_REFS or (n == BASE_REFS + 1 and _pooled(a.base))


def add_into(a: Any, b: Any) -> Any:
    """``a + b`` (the engine's gradient sum), computed into ``a`` when the generated
    code passes a dead ``a`` that nothing else holds."""
    n = sys.getrefcount(a)  # before ``a`` is pushed as another call's argument
    if a.shape == b.shape and a.dtype == b.dtype and owns(a, n):
        a += b
        return a
    return a + b


def donating(fn: Callable) -> Callable:
    """Wrap an optimizer update ``fn(p, g, donate)`` so that ``g`` is donated when the
    generated code passes a dead gradient that nothing else holds."""

    def call(p: Any, g: Any) -> Any:
        n = sys.getrefcount(g)  # before ``g`` is pushed as another call's argument
        return fn(p, g, owns(g, n))

    return call


# ----- in-place variants of elementwise operators ---------------------------------------------
def _relu_forward(op: Any, x: Any) -> Any:
    array_module(x).maximum(x, 0, out=x)
    if op.requires_grad:
        op.cache = x
    return x


def _relu_backward(op: Any, dy: Any) -> Any:
    dy *= op.cache > 0
    return dy


def _scale_backward(op: Any, dy: Any) -> Any:
    if op.cache is None:
        return dy
    dy *= op.cache
    return dy


def _add_bias_forward(op: Any, x: Any, b: Any) -> Any:
    if op.requires_grad:
        op.cache = b.shape
    x += b.reshape(1, -1) if op.axis == 0 else b.reshape(-1, 1)
    return x


def _add_forward_into(k: int) -> Callable:
    def variant(op: Any, a: Any, b: Any) -> Any:
        if op.requires_grad:
            op.cache = (a.shape, a.dtype, b.shape, b.dtype)
        out = (a, b)[k]
        array_module(a).add(a, b, out=out)
        return out

    return variant


def _registry() -> dict:
    reg: dict = {}

    def put(module: str, cls: str, is_backward: bool, variants: list) -> None:
        try:
            mod = __import__(module, fromlist=[cls])
            reg[(getattr(mod, cls), is_backward)] = variants
        except (ImportError, AttributeError):  # pragma: no cover - operator renamed
            pass

    put("singa.autograd.activation", "ReLU", False, [(_relu_forward, 0)])
    put("singa.autograd.activation", "ReLU", True, [(_relu_backward, 0)])
    put("singa.autograd.dropout", "Dropout", True, [(_scale_backward, 0)])
    put("singa.autograd.linalg", "AddBias", False, [(_add_bias_forward, 0)])
    put("singa.autograd.elementwise", "Add", False, [(_add_forward_into(0), 0), (_add_forward_into(1), 1)])
    return reg


#: (operator class, is_backward) -> [(variant(op, *arrays), index of the input written)]
VARIANTS: dict = {}


def _host(a: Any) -> np.ndarray:
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else a


def _same_bits(a: Any, b: Any) -> bool:
    if not (hasattr(a, "shape") and hasattr(b, "shape")):
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
    if not VARIANTS:
        VARIANTS.update(_registry())
    cands = VARIANTS.get((type(op), is_backward))
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
