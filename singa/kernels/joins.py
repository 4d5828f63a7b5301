"""Joining arrays along an inner axis on the workers.

A self-attention layer's input gradient is one product of its q, k and v gradients
side by side (:class:`~singa.layer.MultiHeadAttention` packs the three projections),
so each training step joins three (batch, length, width) gradients along the last
axis: numpy's ``concatenate`` runs on one thread (a (16, 128, 3 x 128) float32 join
took 0.30 ms, 0.17 ms in two blocks of the leading axis on two workers, 2-vCPU VM).
The copies move bits only, so the result is numpy's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from singa.kernels import workers

__all__ = ["concatenate", "MIN_SIZE"]

#: joins of fewer elements are left to numpy (one call costs less than the hand-off)
MIN_SIZE = 1 << 18


def _splittable(arrays: Sequence[Any], axis: int) -> bool:
    first = arrays[0]
    return (
        0 < axis < first.ndim
        and first.shape[0] > 1
        and all(type(a) is np.ndarray and a.dtype == first.dtype for a in arrays)
        and all(a.shape[:axis] == first.shape[:axis] for a in arrays)
        and all(a.shape[axis + 1 :] == first.shape[axis + 1 :] for a in arrays)
        and sum(a.size for a in arrays) >= MIN_SIZE
    )


def concatenate(arrays: Sequence[Any], axis: int) -> Any:
    """``np.concatenate(arrays, axis)`` of numpy arrays: arrays of one dtype joined
    along an axis past the first are copied in blocks of the first axis on the workers."""
    if not _splittable(arrays, axis):
        return np.concatenate(arrays, axis=axis)
    first = arrays[0]
    shape = list(first.shape)
    shape[axis] = sum(a.shape[axis] for a in arrays)
    out = np.empty(shape, first.dtype)
    pre = (slice(None),) * (axis - 1)
    spans, start = [], 0
    for a in arrays:
        spans.append(slice(start, start + a.shape[axis]))
        start += a.shape[axis]

    def piece(i: int, j: int) -> None:
        for a, span in zip(arrays, spans):
            out[(slice(i, j),) + pre + (span,)] = a[i:j]

    workers.run_pieces(piece, workers.work_pieces(first.shape[0], 2 * out.size))
    return out
