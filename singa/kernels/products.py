"""Large matrix products split over the workers.

Inside a model call numpy's BLAS runs on one thread (:func:`workers.blas_for_workers`:
OpenBLAS's own spinning threads would take the second core from the workers), so a
large product, such as the MNIST CNN's (64, 1024) @ (1024, 500) classifier and its
two gradient products, would leave the other core idle. :func:`matmul` cuts the
result of a large 2-D product into row (or column) blocks and multiplies them on the
workers, each on one BLAS thread.

A deep product (an inner dimension several times the result's longer side, which is
at least :data:`DEEP_MIN_SIDE` twice) runs instead as two products over the halves of
the inner dimension, side by side, added after: blocks would each pack the whole other
operand.

Determinism: the blocks and halves depend only on the operands' shapes, never on the
worker count, and every element of the result is one block's dot product over the
whole inner dimension (or the sum of the two halves' products, in that order), each
product on one BLAS thread (:func:`workers.run_pieces` holds BLAS there with one
worker too), so one worker (the blocks run in turn) and several give the same bits,
and eager and graph execution, which both call this function, stay bitwise equal.
Blocks need not give the bits of the whole product: OpenBLAS's result for a row can
depend on the product's row count (its Haswell kernels do), so a product is cut the
same way on every call, never sometimes whole and sometimes in blocks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.kernels import adds, blas_threads, workers
from singa.kernels.buffers import scratch

__all__ = ["matmul", "matmuls", "block_count", "SPLIT_MACS", "BLOCK_MACS", "DEEP_RATIO", "DEEP_MIN_SIDE"]

#: products with fewer multiply-adds run whole: below it the hand-off to a worker (50-80
#: us) eats the gain (2 cores, one BLAS thread each: (64, 784) @ (784, 100), 5 M, took
#: 170 us whole and 300-360 us in two blocks; (64, 1024) @ (1024, 500), 33 M, 870 and 650 us)
SPLIT_MACS = 1 << 24
#: multiply-adds per block pair: each block costs its own packing of the other operand
#: and its own edge tiles. On one BLAS thread the gpt's (2048, 128) @ (128, 512) products
#: took 1.5 % longer in 2 blocks than whole, 10 % in 4 and 14 % in 8 (bench/README.md)
BLOCK_MACS = 1 << 27
#: at most this many blocks (an even number)
_MAX_BLOCKS = 8


#: products whose inner dimension is more than this many times the result's longer side
#: run whole: each block packs the whole other operand, most of such a product's work (a
#: weight gradient (128, 2048) @ (2048, 128) took 0.74 ms in two blocks, 0.39 ms whole)
DEEP_RATIO = 4
#: ... unless their result has a side of at least twice this many: then the two halves
#: of the inner dimension run side by side and are added (a ResNet-18 last-stage
#: convolution's columns at batch 32, (512, 4608) @ (4608, 512), took 15.5 ms whole,
#: 11.1 ms in two row blocks, 7.9 ms in two halves, on two workers)
DEEP_MIN_SIDE = 256


def _plain(a: Any, b: Any, out: Any) -> bool:
    """Whether ``a @ b`` (into ``out``) is a float product of two numpy matrices."""
    return (
        isinstance(a, np.ndarray)
        and isinstance(b, np.ndarray)
        and a.ndim == 2
        and b.ndim == 2
        and a.dtype == b.dtype
        and a.dtype.kind == "f"
        and (out is None or _separate_out(a, b, out))
    )


def _splittable(a: Any, b: Any, out: Any) -> bool:
    """Whether ``a @ b`` is a large float product of two numpy matrices worth cutting
    into blocks (not a deep one: see :data:`DEEP_RATIO`)."""
    if not _plain(a, b, out):
        return False
    (m, k), n = a.shape, b.shape[1]
    side = max(m, n)
    return m * k * n >= SPLIT_MACS and (k <= DEEP_RATIO * side or side >= 2 * DEEP_MIN_SIDE)


def _separate_out(a: Any, b: Any, out: Any) -> bool:
    """Whether ``out`` is a numpy array of the operands' dtype that shares no memory
    with them (a block written while another block reads its operand would race)."""
    return (
        isinstance(out, np.ndarray)
        and out.dtype == a.dtype
        and not np.may_share_memory(out, a)
        and not np.may_share_memory(out, b)
    )


def block_count(macs: int) -> int:
    """How many blocks a product of ``macs`` multiply-adds (at least
    :data:`SPLIT_MACS`) is cut into: two per :data:`BLOCK_MACS`, at most
    ``_MAX_BLOCKS``, always even."""
    return min(_MAX_BLOCKS, 2 * max(1, macs // BLOCK_MACS))


def _product_into(a: Any, b: Any, out: Any) -> None:
    np.matmul(a, b, out=out)


def _block_pieces(a: Any, b: Any, out: Any) -> list:
    """The blocks of the large product ``a @ b`` into ``out``: row blocks, or column
    blocks when the result is wider than tall."""
    (m, k), n = a.shape, b.shape[1]
    blocks = block_count(m * k * n)
    if m >= n:
        return [(a[i:j], b, out[i:j]) for i, j in workers.even_pieces(m, blocks)]
    return [(a, b[:, i:j], out[:, i:j]) for i, j in workers.even_pieces(n, blocks)]


def matmul(a: Any, b: Any, out: Any = None) -> Any:
    """``a @ b`` (into ``out`` when given): a large 2-D numpy product in row blocks
    (column blocks when the result is wider than tall) on the workers; any other
    product through :func:`blas_threads.matmul`. A stack of matrices times one matrix
    is one product of the stacked rows: numpy's stacked matmul loops over the leading
    axes, and runs without BLAS when ``a`` is a transposed view."""
    if a.ndim > 2 and b.ndim == 2 and out is None and type(a) is np.ndarray:
        rows = matmul(a.reshape(-1, a.shape[-1]), b)
        return rows.reshape(*a.shape[:-1], b.shape[-1])
    if not _splittable(a, b, out):
        return blas_threads.matmul(a, b, out=out)
    if out is None:
        out = np.empty((a.shape[0], b.shape[1]), a.dtype)
    if a.shape[1] > DEEP_RATIO * max(out.shape):
        _inner_halves(a, b, out)
    else:
        workers.run_pieces(_product_into, _block_pieces(a, b, out), np)
    return out


def _inner_halves(a: Any, b: Any, out: Any) -> None:
    """A deep ``a @ b`` into ``out`` as two products over the halves of the inner
    dimension side by side, the second into a pooled array added after: each packs
    half of each operand, where row blocks each pack the whole other one. The halves
    depend on the shapes only, so one or two workers give the same bits."""
    (i, h), (_, k) = workers.even_pieces(a.shape[1], 2)
    rest = scratch(np, out.shape, out.dtype)
    workers.run_pieces(_product_into, [(a[:, i:h], b[i:h], out), (a[:, h:k], b[h:k], rest)], np)
    if not adds.add(out, rest, out):
        out += rest


def matmuls(pairs: list) -> list:
    """``[matmul(a, b) for a, b in pairs]``: several float products of which one at
    least is large run whole, side by side on the workers (one piece each); a lone one
    as :func:`matmul` runs it. Whole products cost less than blocks (each block packs
    the other operand again), and one wait covers them all."""
    outs, plain = [], []
    for a, b in pairs:
        stacked = a.ndim > 2 and b.ndim == 2 and type(a) is np.ndarray
        a2 = a.reshape(-1, a.shape[-1]) if stacked else a
        if _plain(a2, b, None):
            out = np.empty((a2.shape[0], b.shape[1]), a2.dtype)
            plain.append((a2, b, out))
        else:
            out = blas_threads.matmul(a2, b)
        outs.append(out.reshape(*a.shape[:-1], b.shape[-1]) if stacked else out)
    if len(plain) > 1 and any(_splittable(*p) for p in plain):
        # whole products side by side: no block packs an operand twice (a layer's two
        # gradient products have the same multiply-adds, so two workers stay even)
        workers.run_pieces(_product_into, plain, np)
    else:
        for a2, b, out in plain:
            matmul(a2, b, out=out)
    return outs
