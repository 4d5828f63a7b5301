"""The gradient collectives of data-parallel training, as functions of arrays.

Each function takes an engine (see :mod:`singa.parallel.engines`) and arrays (numpy or
cupy: the array module is taken from the arrays), returns new arrays and leaves its
inputs unchanged, except where it says so (the error-feedback accumulation of the
sparse reductions, the parameters of :func:`average_into`). Being plain functions of
arrays, they can be recorded as single kernels of a graph and replayed.

- :func:`fused_sum`: concatenate, one all-reduce, split (SINGA's fused all-reduce).
- :func:`fused_sum_half`: the same with float16 on the wire, float32 before and after.
- :func:`sparse_sum`: each rank sends (index, value) pairs of its significant
  elements (absolute value >= a threshold, or the top-K by absolute value) and every
  rank adds everyone's pairs into zeros; with an accumulation array, what was not
  sent is kept and added to the next step's gradient (error feedback).
- :func:`fusion_groups`: which gradients travel together (SINGA's rule).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from singa.device import array_module

__all__ = [
    "fusion_groups",
    "flatten",
    "split_like",
    "fused_sum",
    "fused_sum_half",
    "sparse_sum",
    "average_into",
]


def fusion_groups(sizes: Sequence[int], threshold: int) -> list[list[int]]:
    """Indices of the tensors reduced together, in the order the reductions happen
    (SINGA's rule): a tensor of more than ``threshold`` elements goes alone, at once;
    smaller ones are queued and sent together as soon as the queue holds more than
    ``threshold`` elements; what is left is sent last."""
    groups: list[list[int]] = []
    queue: list[int] = []
    queued = 0
    for i, n in enumerate(sizes):
        if n > threshold:
            groups.append([i])
            continue
        queue.append(i)
        queued += n
        if queued > threshold:
            groups.append(queue)
            queue, queued = [], 0
    if queue:
        groups.append(queue)
    return groups


def flatten(arrays: Sequence[Any], dtype: Any = None) -> Any:
    """One new contiguous 1-D array holding ``arrays`` one after another."""
    xp = array_module(arrays[0])
    dtype = arrays[0].dtype if dtype is None else dtype
    total = sum(int(a.size) for a in arrays)
    flat = xp.empty(total, dtype=dtype)
    offset = 0
    for a in arrays:
        flat[offset : offset + a.size] = a.reshape(-1)
        offset += a.size
    return flat


def split_like(flat: Any, arrays: Sequence[Any]) -> tuple:
    """Views of ``flat`` shaped like ``arrays`` (the inverse of :func:`flatten`)."""
    out = []
    offset = 0
    for a in arrays:
        out.append(flat[offset : offset + a.size].reshape(a.shape))
        offset += a.size
    return tuple(out)


def fused_sum(engine: Any, arrays: Sequence[Any], scale: float = 1.0) -> tuple:
    """The sums of ``arrays`` over the ranks, times ``scale``, in one all-reduce."""
    flat = engine.allreduce(flatten(arrays))
    if scale != 1.0:
        flat *= flat.dtype.type(scale)
    return split_like(flat, arrays)


def fused_sum_half(
    engine: Any, arrays: Sequence[Any], scale: float = 1.0, clip: float | None = None
) -> tuple:
    """:func:`fused_sum` with the values sent as float16 (summed in float16 by the
    network, as NCCL's half all-reduce does); each array is first clipped to
    ``[-clip, clip]`` when ``clip`` is given. Float32 in, float32 out."""
    for a in arrays:
        if a.dtype != np.float32:
            raise TypeError(f"half-precision all-reduce takes float32 gradients, got {a.dtype}")
    xp = array_module(arrays[0])
    flat = flatten(arrays)
    if clip is not None:
        xp.clip(flat, -clip, clip, out=flat)
    half = engine.allreduce(flat.astype(np.float16))
    flat = half.astype(np.float32)
    if scale != 1.0:
        flat *= np.float32(scale)
    return split_like(flat, arrays)


def _select(xp: Any, flat: Any, spars: float, top_k: bool) -> Any:
    """Indices of the elements that are sent."""
    mag = xp.abs(flat)
    if top_k:
        k = max(1, math.ceil(spars * flat.size))
        if k >= flat.size:
            return xp.arange(flat.size, dtype=np.int64)
        idx = xp.argpartition(-mag, k - 1)[:k]
        return xp.sort(idx)
    return xp.nonzero(mag >= spars)[0]


def sparse_sum(
    engine: Any,
    arrays: Sequence[Any],
    spars: float,
    top_k: bool,
    accumulation: Any = None,
    scale: float = 1.0,
) -> tuple:
    """The ranks' sums of the significant elements of ``arrays`` (float32), times
    ``scale``.

    Args:
        spars: with ``top_k`` the fraction of elements each rank sends (the
            ``ceil(spars * n)`` largest by absolute value), else the absolute value at
            or above which an element is sent.
        accumulation: a 1-D float32 array of the total size, or None. When given it is
            added to the gradient before selection and then holds, in place, what was
            not sent (error feedback, SINGA's ``corr=True``).
    """
    xp = array_module(arrays[0])
    flat = flatten(arrays, np.float32)
    if accumulation is not None:
        flat += accumulation
    idx = _select(xp, flat, spars, top_k)
    vals = flat[idx]
    if accumulation is not None:
        accumulation[...] = flat
        accumulation[idx] = 0
    counts = engine.allgather(xp.asarray([idx.size], dtype=np.int32)).reshape(-1)
    counts = [int(c) for c in (counts.get() if xp is not np else counts)]
    width = max(counts)
    packed = xp.zeros(2 * width, dtype=np.int32)
    packed[: idx.size] = idx.astype(np.int32)
    packed[width : width + idx.size] = vals.view(np.int32)  # bits travel, no arithmetic
    everyone = engine.allgather(packed)
    total = xp.zeros(flat.size, dtype=np.float32)
    for r, n in enumerate(counts):  # the same order on every rank: identical sums
        got = everyone[r]
        total[got[:n]] += got[width : width + n].view(np.float32)
    if scale != 1.0:
        total *= np.float32(scale)
    return split_like(total, arrays)


def average_into(engine: Any, arrays: Sequence[Any]) -> None:
    """Replace each array, in place, by its mean over the ranks (one all-reduce)."""
    flat = engine.allreduce(flatten(arrays))
    flat /= flat.dtype.type(engine.world_size)
    for a, v in zip(arrays, split_like(flat, arrays)):
        a[...] = v
