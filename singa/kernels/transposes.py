"""Copies of transposed arrays in tiles, so that reads and writes both stay in cache.

A convolution's filter bank (O, C, kh, kw) is multiplied in other layouts: (kh, kw, C,
O) in the forward, (kh, kw, O, C) (flipped) for the input's gradient, and the filters'
gradient comes back as (C, kh, kw, O) or (O, kh, kw, C). numpy copies a transposed view
in the order of the copy's own memory, reading the source across its large strides: a
ResNet-18 filter bank of 512 x 512 3x3 filters (9.4 MB) took 3-11 ms a copy on one core,
about 65 ms of a batch-32 training step. Its strides are multiples of 2 KB, so the
lines one pass of the copy reads fall into few L1 sets and evict each other.

:func:`copy_into` walks the source's contiguous axis and the copy's contiguous axis in
tiles of :data:`TILE` x :data:`TILE` elements, every other axis outside them ordered by
the source's strides (the largest outermost), so each line is read from memory once;
pieces of the outermost axis run on the workers.
Elements move unchanged: the result equals numpy's copy bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.kernels import workers
from singa.kernels.jit import kernel

__all__ = ["copy_into", "MIN_SIZE", "TILE"]

#: arrays with fewer elements are copied by numpy: up to 192 x 192 3x3 filters (331 K)
#: numpy was as fast or faster (0.07 against 0.24 ms for a flipped 128 x 128 bank)
MIN_SIZE = 1 << 19
#: the side of a tile (elements)
TILE = 16


@kernel
def _copy_tiles(src, out, tile):  # pragma: no cover (compiled)
    """out[a, b, p, q] = src[a, b, p, q] (4-D, one shape), with src contiguous along p
    and out along q, in tiles of p and q."""
    n_a, n_b, n_p, n_q = src.shape
    for a in range(n_a):
        for b in range(n_b):
            for p0 in range(0, n_p, tile):
                p1 = min(p0 + tile, n_p)
                for q0 in range(0, n_q, tile):
                    q1 = min(q0 + tile, n_q)
                    for p in range(p0, p1):
                        for q in range(q0, q1):
                            out[a, b, p, q] = src[a, b, p, q]


def _tiled_order(src: Any) -> list | None:
    """The axis order (outer axes by the source's strides, largest first, then the
    source's contiguous axis, then the last one) in which :func:`_copy_tiles` copies
    ``src`` into a C-ordered array, or None when the source's contiguous axis is the
    last (a plain copy reads it in order) or the last axis is shorter than a tile."""
    strides = [abs(s) for s in src.strides]
    fast = min(range(src.ndim), key=lambda i: (strides[i], -i))
    last = src.ndim - 1
    if fast == last or src.shape[fast] == 1 or src.shape[last] < TILE:
        return None  # a short last axis: numpy's order reads few streams already
    outer = sorted((i for i in range(src.ndim) if i not in (fast, last)), key=lambda i: -strides[i])
    return outer + [fast, last]


def copy_into(src: Any, out: Any) -> None:
    """``out[...] = src`` for a C-ordered ``out`` of ``src``'s shape and dtype: a 4-D
    (or lower) numpy float array of at least :data:`MIN_SIZE` elements in tiles, any
    other by numpy."""
    order = None
    if type(src) is np.ndarray and src.ndim <= 4 and src.size >= MIN_SIZE and src.dtype.kind == "f":
        order = _tiled_order(src)
    if order is None or not out.flags.c_contiguous or out.dtype != src.dtype or out.shape != src.shape:
        np.copyto(out, src)
        return
    pad = (1,) * (4 - src.ndim)
    s4, o4 = src.transpose(order), out.transpose(order)
    s4, o4 = s4.reshape(pad + s4.shape), o4.reshape(pad + o4.shape)
    workers.run_pieces(
        lambda i, j: _copy_tiles(s4[i:j], o4[i:j], TILE), workers.work_pieces(len(s4), 2 * s4.size)
    )
