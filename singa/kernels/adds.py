"""Adding two arrays on the workers: the residual adds, bias adds and gradient sums of a
training step.

numpy's ``add`` runs on one thread. A training step makes dozens of large adds (each
residual block's sum and its gradient paths, each linear layer's bias), and none ran on
the second core: a 1-million-element float32 ``a + b`` took 494 us (median) in numpy
and 470 us in the compiled loop on one worker, 345 us on two (2-vCPU VM).
:func:`add` computes ``out = a + b`` by a compiled loop over pieces on the workers when
``b`` is ``a``'s shape or a row broadcast over ``a``'s leading axes (a bias), with the
arrays laid out alike; operands of one shape laid out differently take numpy's add
over pieces of the first axis on the workers, and every other case is left to numpy.
Each element is one IEEE addition either way, so the bits are numpy's.

An ``out`` that is one of the operands (a residual or bias add in place, a gradient
summed into a dead one) takes a kernel of its own, with the operands in the same order
(``a + b``: a NaN keeps ``a``'s payload, as in numpy): LLVM guards the
vector loop of ``out[i] = a[i] + b[i]`` with a check that ``out`` overlaps neither
input, and when ``out`` is ``a`` it ran the scalar loop instead (one core, float32: a
1-million-element add 403 -> 315 us, numpy's 312; a (2048, 512) bias row 359 -> 157 us,
numpy's 275).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.kernels import workers
from singa.kernels.jit import kernel, takes_floats

__all__ = ["add", "added", "MIN_SIZE"]

#: arrays with fewer elements are left to numpy (its call costs less than the kernel's)
MIN_SIZE = 1 << 14


@kernel
def _add(a, b, out):  # pragma: no cover (compiled)
    for i in range(out.size):
        out[i] = a[i] + b[i]


@kernel
def _add_row(a, row, out):  # pragma: no cover (compiled)
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = a[i, j] + row[j]


@kernel
def _add_to(b, out):  # pragma: no cover (compiled)
    for i in range(out.size):
        out[i] = out[i] + b[i]


@kernel
def _add_to_second(a, out):  # pragma: no cover (compiled)
    for i in range(out.size):
        out[i] = a[i] + out[i]


@kernel
def _add_row_to(row, out):  # pragma: no cover (compiled)
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] += row[j]


def _one_layout(*arrays: Any) -> bool:
    """Whether the arrays are dense and laid out alike (all C order, or one set of
    strides), so that the kernel runs over their memory with no copy."""
    first = arrays[0]
    if all(x.flags.c_contiguous for x in arrays):
        return True
    if not all(x.strides == first.strides for x in arrays):
        return False
    order = sorted(range(first.ndim), key=lambda i: -first.strides[i])
    return first.transpose(order).flags.c_contiguous


def _row_of(a: Any, b: Any) -> Any:
    """``b`` as a 1-D row when ``a + b`` adds it to every row of ``a`` (``b``'s shape,
    leading ones left off, is a suffix of ``a``'s), else None."""
    shape = b.shape
    while shape and shape[0] == 1:
        shape = shape[1:]
    if not shape or len(shape) > a.ndim or a.shape[a.ndim - len(shape) :] != shape:
        return None
    return b.reshape(-1)


def add(a: Any, b: Any, out: Any) -> bool:
    """``out[...] = a + b`` on the workers and True, when the kernels take the arrays:
    numpy float32 or float64 arrays of one dtype, ``a`` and ``out`` of one shape, ``b``
    of that shape too or a row added to every row, and ``out`` either ``a`` or ``b``
    with the other apart from it, or apart from both. Otherwise nothing is written and
    the result is False: the caller uses numpy."""
    if a.size < MIN_SIZE or not takes_floats(a, b, out) or a.shape != out.shape:
        return False
    if any(x is not out and np.may_share_memory(out, x) for x in (a, b)):  # pieces would race
        return False
    if b.shape == a.shape:
        if not _one_layout(a, b, out):  # numpy reads each in place; the kernel would copy
            return _numpy_pieces(a, b, out)
        if out is a:
            workers.run_flat(_add_to, out, b)
        elif out is b:
            workers.run_flat(_add_to_second, out, a)
        else:
            workers.run_flat(_add, out, a, b)
        return True
    row = _row_of(a, b)
    if row is None or not (a.flags.c_contiguous and out.flags.c_contiguous):
        return False
    a2, out2 = a.reshape(-1, row.size), out.reshape(-1, row.size)
    row = np.ascontiguousarray(row)
    rows = a2.shape[0]
    pieces = workers.work_pieces(rows, 3 * a.size)
    if out is a:
        workers.run_pieces(lambda i, j: _add_row_to(row, out2[i:j]), pieces)
    else:
        workers.run_pieces(lambda i, j: _add_row(a2[i:j], row, out2[i:j]), pieces)
    return True


def _numpy_pieces(a: Any, b: Any, out: Any) -> bool:
    """``out[...] = a + b`` for operands laid out differently (a ResNet's gradient sum
    where a strided convolution's padded dx meets the shortcut's): numpy's add over
    pieces of the first axis on the workers (numpy's bits; its loop drops the GIL).
    (64, 16, 32, 32) float32 into the NHWC operand from a padded crop: 426 -> 285 us."""
    if a.ndim < 2 or a.shape[0] < 2:
        return False
    pieces = workers.work_pieces(a.shape[0], 3 * a.size)
    workers.run_pieces(lambda i, j: np.add(a[i:j], b[i:j], out=out[i:j]), pieces)
    return True


def added(a: Any, b: Any) -> Any:
    """``a + b`` as numpy gives it (shape, dtype and bits), through :func:`add` when it
    takes the arrays."""
    if type(a) is np.ndarray and type(b) is np.ndarray and a.dtype == b.dtype and a.size >= MIN_SIZE:
        out = np.empty_like(a)  # a's layout, as numpy's a + b keeps it
        if add(a, b, out):
            return out
    return a + b
