"""Batch slices of a convolution on the workers, and the filter layouts of its products.

The forward (:mod:`singa.kernels.conv_forward`) and the backward
(:class:`singa.autograd.conv.Conv2d`) of an ungrouped convolution make and multiply
their columns a batch slice at a time (about ``_CHUNK_BYTES`` of columns each), so the
copy and the product meet in the cache; this module cuts the batch into those slices,
runs them on :mod:`singa.kernels.workers` with BLAS on one thread, makes the columns of
each slice (:func:`column_chunks`) and lays out the filters for the products
(:func:`laid_out`, :func:`product_layout`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from singa.device import array_module
from singa.kernels import blas_threads, transposes, workers
from singa.kernels import im2col as im
from singa.kernels.buffers import scratch

__all__ = [
    "KMAJOR_MAX_C",
    "accumulate",
    "add_product",
    "batch_slices",
    "column_chunks",
    "laid_out",
    "product_layout",
    "run_slices",
    "sum_in_order",
]

KMAJOR_MAX_C = 4  # inputs of at most this many channels (per group 1), NCHW: kernel-major columns
# ungrouped convolutions make and multiply their columns in slices of about this
# many bytes, which stay in the CPU's cache between the copy and the product. The
# products of few-channel layers (at most _SKINNY_MAX_O outputs per column row) are
# memory-bound and take smaller slices: ResNet-20's training step (16-64 channels,
# batch 64, one BLAS thread) took 794 ms of CPU with 8 MB slices against 567-577 ms
# with 1-2 MB ones, while AlexNet's and ResNet-18's (64-512 channels) were 5% slower
# with 2 MB slices (minima, interleaved; bench/README.md)
_CHUNK_BYTES = 8 << 20
_SKINNY_CHUNK_BYTES = 2 << 20
_SKINNY_MAX_O = 64
# the weight-gradient partials of a convolution's batch slices (kept until they are
# added in slice order) take at most about this many bytes: runs of several slices
# share one partial when the filters are large
_PARTIALS_BYTES = 16 << 20
# consecutive batch slices handed to a worker as one piece
_SLICES_PER_PIECE = 1
# a convolution whose batch fits one slice runs its products on one BLAS thread when
# they take fewer multiply-adds than this: batch-1 3x3 convolutions of 16-64 channels
# (2-2.4 M) took 0.18-0.23 ms on one thread against 0.23-0.32 ms on two (minima of
# interleaved blocks, load 9), and two threads under load cost up to 12 ms a call
_ONE_THREAD_MACS = 1 << 24
# a batch whose products take at least this many multiply-adds is cut into two slices
# or more even when its columns fit one: inside a training step BLAS holds one thread
# (workers.blas_for_workers), so a lone slice ran on one core (ResNet-18, batch 32,
# the 256 -> 512 channel 3x3 stride-2 convolution, 604 M: backward 12.6 -> 8.5 ms,
# forward 6.3 -> 4.5 ms on two workers; ResNet-20, batch 64, the 1x1 stride-2
# shortcuts, 8.4 M and 8.4 M, most of whose time is the columns and col2im: backward
# 2.1-2.3 -> 1.2-1.4 ms and 1.1-1.2 -> 0.7-0.9 ms, forward 0.9 -> 0.5-0.7 ms and 0.5 ->
# 0.3-0.4 ms in the step; 2^22 is about where two halves outrun the hand-off)
_SPLIT_MACS = 1 << 22


# ----- batch slices on the workers ---------------------------------------------------------------
# Threading: numpy runs the im2col copies and col2im on one core, and on the skinny
# products of a convolution (a few dozen output columns, a long inner dimension)
# OpenBLAS's second thread mostly waits, so before this the convolutions used a second
# core poorly (bench/README.md: a second thread sped PyTorch's CNN step up 1.3-1.9x,
# ours 0.9-1.5x, while our CPU time per step doubled). Each batch slice makes its own
# columns and products instead, the slices spread over singa.kernels.workers with
# BLAS on one thread each: copies, col2im and products all run on every core, no
# product hands work between BLAS threads, and a worker that is preempted holds up
# one slice, not the whole product. What it saved, on a 2-core VM loaded by other
# jobs (so indicative; bench/README.md, bench_conv_threads.py): CPU time per ResNet-20
# graph step 1.35-1.6 s against 3.3-8.5 s before (bench_graph.py pairs, load 7-9);
# single convolutions 1.15-1.65x faster on two workers than on one; on one core the
# slicing costs up to 10 % more work. The slices depend only on the shapes, the weight-gradient partials
# are added in slice order, and the products always run on one BLAS thread, so the
# bits do not depend on the worker count.


def batch_slices(xp: Any, n: int, per_sample: int, width: int) -> list[tuple[int, int]]:
    """``range(n)`` cut into even ``(start, stop)`` slices of about ``_CHUNK_BYTES``
    (``_SKINNY_CHUNK_BYTES`` when the products have ``width`` <= ``_SKINNY_MAX_O``
    output columns) when a sample's columns take ``per_sample`` bytes: an even number
    of slices when there are several, so that two workers finish together, and two at
    least once the products (``width`` columns of output for each float32 column row)
    take ``_SPLIT_MACS`` multiply-adds (the whole batch on a GPU)."""
    if xp is not np:
        return [(0, n)]
    budget = _SKINNY_CHUNK_BYTES if 0 < width <= _SKINNY_MAX_O else _CHUNK_BYTES
    count = -(-n * per_sample // budget)
    if n * per_sample // 4 * width >= _SPLIT_MACS:
        count = max(count, 2)
    return workers.even_pieces(n, count + (count > 1 and count % 2))


def run_slices(xp: Any, fn: Any, slices: list, macs: int, partial_bytes: int = 0) -> list:
    """``fn(run)`` for runs of ``_SLICES_PER_PIECE`` consecutive ``slices`` (an even
    number of runs when there are several), on the workers with BLAS on one thread,
    results in order. When each run returns a partial sum of ``partial_bytes``, fewer
    and longer runs keep all partials under ``_PARTIALS_BYTES``. A single run (small
    work: the batch in one slice, or a GPU) is called inline, since a hand-off to a
    worker costs 20-50 us: on one BLAS thread when its products take fewer than
    ``_ONE_THREAD_MACS`` multiply-adds (``macs``, of the largest kind of product), on
    BLAS's own threads otherwise."""
    if len(slices) == 1:  # the common batch-1 case, without the pieces' bookkeeping
        if xp is not np or macs >= _ONE_THREAD_MACS:
            return [fn(slices)]
        with blas_threads.limit(1):
            return [fn(slices)]
    runs = -(-len(slices) // _SLICES_PER_PIECE)
    runs += runs > 1 and runs % 2
    if partial_bytes:
        runs = min(runs, max(2, _PARTIALS_BYTES // partial_bytes))
    parts = [(slices[a:b],) for a, b in workers.even_pieces(len(slices), runs)]
    if xp is not np or (len(parts) < 2 and macs >= _ONE_THREAD_MACS):
        return [fn(*p) for p in parts]
    with blas_threads.limit(1):  # also with one worker: the same products as with two
        return workers.run_pieces(fn, parts, xp)


def laid_out(xp: Any, view: Any, shape: tuple) -> Any:
    """The filters ``view`` (a transposed view of W) copied into a pooled array and
    reshaped to ``shape`` for the products: a fresh copy on every call is page-faulted
    in anew once it is above glibc's mmap threshold (128 KB: a 64x64 3x3 filter bank).
    Filters already laid out so (:func:`product_layout`) are used as they are. The copy
    goes in tiles (:func:`singa.kernels.transposes.copy_into`)."""
    if view.flags.c_contiguous:
        return view.reshape(shape)
    out = scratch(xp, view.shape, view.dtype)
    if xp is np:
        transposes.copy_into(view, out)
    else:
        xp.copyto(out, view)
    return out.reshape(shape)


def product_layout(W: Any, groups: int = 1) -> Any:
    """Filters ``W`` (O, C, kh, kw) as a view of a copy laid out (O, kh, kw, C) in memory,
    the layout in which the pixel-major forward multiplies them (an ungrouped
    convolution of more than ``KMAJOR_MAX_C`` channels), so that its products read them
    without a copy; otherwise ``W`` itself. For weights that stay constant (BatchNorm
    folded in by :mod:`singa.model.inference`, ONNX initializers in ``sonnx.prepare``):
    a batch-1 ResNet-20 inference copied about 1 MB of filters per call before."""
    if groups != 1 or W.ndim != 4 or W.shape[1] <= KMAJOR_MAX_C:
        return W
    return array_module(W).ascontiguousarray(W.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def accumulate(total: Any, part: Any) -> Any:
    """``total + part``, into ``total`` (a fresh array of the caller's) when there is one."""
    if total is None:
        return part
    total += part
    return total


def add_product(xp: Any, total: Any, a: Any, b: Any) -> Any:
    """``total + a @ b`` (``a @ b`` when ``total`` is None), the product written into a
    pooled array: a filter gradient's partial (a 512 x 512 3x3 bank is 9.4 MB) allocated
    afresh is page-faulted in on every call."""
    out = scratch(xp, (a.shape[0], b.shape[1]), a.dtype)
    xp.matmul(a, b, out=out)
    if total is None:
        return out
    total += out
    return total


def sum_in_order(parts: list) -> Any:
    """The sum of the partial results ``parts`` (fresh arrays), added in order."""
    total = parts[0]
    for p in parts[1:]:
        total += p
    return total


def column_chunks(xp: Any, xh: Any, geo: tuple, pads: tuple, slices: list) -> Iterator[tuple[int, int, Any]]:
    """Yield ``(i0, i1, cols)`` for each batch slice ``(i0, i1)`` of ``slices``: the
    columns (rows (i1-i0)*OH*OW, kh*kw*C) of the windows of samples ``i0:i1`` of ``xh``
    (N, H, W, C, any strides) zero-padded by ``pads`` (top, left, bottom, right).
    Each slice is padded into a small reused buffer, so no padded copy of the whole
    input is made (the cached padded inputs were most of a ResNet's peak memory above
    its activations). The columns live in one reused buffer: use each before taking
    the next."""
    kh, kw, _, _, _, _, oh, ow = geo
    h, w, c = xh.shape[1:]
    t, l, b, r = pads
    step = max(i1 - i0 for i0, i1 in slices)
    buf = scratch(xp, (step, oh, ow, 1, kh, kw, c), xh.dtype)
    padded = None if t == l == b == r == 0 else scratch(xp, (step, h + t + b, w + l + r, c), xh.dtype)
    if padded is not None:
        im.zero_border(padded, h, w, pads)  # once: each slice overwrites only the middle
    for i0, i1 in slices:
        src = xh[i0:i1]
        if padded is not None:
            src = im.pad_nhwc_into(padded[: i1 - i0], src, pads, border=False)
        cb = buf[: i1 - i0]
        xp.copyto(cb, im.windows(xp, src, *geo))
        yield i0, i1, cb.reshape((i1 - i0) * oh * ow, kh * kw * c)
