"""Compiled CPU kernel of a row scatter-add, ``a[idx[i]] += v[i]`` for every i in order:
the gradient of an embedding lookup (and of a gather along the first axis). numpy's
``np.add.at`` takes an element at a time through a generic indexing loop (about 30 ns
each: 8 ms for a batch of 2048 tokens of width 128); this adds whole rows, in the same
order, so the sums are the same bits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.kernels.jit import kernel, takes_floats

__all__ = ["add_rows", "add_rows_applies"]


def add_rows_applies(a: Any, key: Any, v: Any) -> bool:
    """Whether ``a[key] += v`` (repeats accumulating) is a row scatter-add the kernel
    takes: ``key`` one integer numpy array indexing the first axis of the contiguous
    float ``a``, and ``v`` of shape ``key.shape + a.shape[1:]`` and ``a``'s dtype."""
    if not (isinstance(key, tuple) and len(key) == 1 and isinstance(key[0], np.ndarray)):
        return False
    idx = key[0]
    return (
        idx.dtype.kind in "iu"
        and a.ndim >= 1
        and takes_floats(a, v)
        and a.flags.c_contiguous
        and v.shape == idx.shape + a.shape[1:]
    )


def add_rows(a: Any, idx: Any, v: Any) -> None:
    """``a[idx[i]] += v[i]`` over the flattened indices in order (negative indices count
    from the end, as numpy's); IndexError naming the first index out of range, before
    anything is added."""
    n = a.shape[0]
    flat = np.asarray(idx, dtype=np.int64).reshape(-1)
    if flat.size and (flat.min() < -n or flat.max() >= n):
        bad = flat[(flat < -n) | (flat >= n)][0]
        raise IndexError(f"index {bad} is out of bounds for axis 0 with size {n}")
    rows = np.ascontiguousarray(v).reshape(flat.size, -1)
    _add_rows(a.reshape(n, -1), flat, rows)


@kernel
def _add_rows(a, idx, v):  # pragma: no cover (compiled)
    n = a.shape[0]
    for i in range(idx.shape[0]):
        r = idx[i]
        if r < 0:
            r += n
        for j in range(a.shape[1]):
            a[r, j] += v[i, j]
