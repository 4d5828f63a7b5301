"""BatchNorm's CPU passes: per-channel sums, the normalised output, the input's gradient.

Training BatchNorm in numpy made about seven passes over memory each way (the sums as
products with ones, x - mean, its square, the scalings), all on one core. Here forward
makes two (per-channel sums of x - k and its square, then the normalised output) and
backward two (sums of dy and dy * (x - mean), then dx), each run over batch pieces on
the worker threads: on (64, 16, 32, 32) NHWC float32, one thread, forward 0.3 ms
against 0.9 ms (bench/README.md, "Design measurements"). Rows are the samples in
memory order, (N, A * C * B) with the channel axis in the middle (``blocks`` = (A, C, B));
per-channel coefficients come spread along a row. Partial sums are taken in the input's
dtype over at most ``_BLOCK`` rows, then added up in float64 per channel, per piece, and
the pieces' sums in piece order: the same bits with one worker or several. The operator
(:class:`singa.autograd.normalization.BatchNorm2d`) lays its arrays out as rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.kernels import workers
from singa.kernels.jit import helper, kernel

__all__ = ["run_sums", "first_rows_mean", "sums", "normalise", "input_grad"]

_BLOCK = 64
_SHIFT_ROWS = 8


def run_sums(u2: Any, ku: Any, v2: Any, kv: Any, blocks: tuple, pieces: list, gate: Any = None) -> Any:
    """Per-channel (sum(u - ku), sum((u - ku) * (v - kv))) in float64, shape (2, C), of
    rows ``u2`` and ``v2`` laid out as ``blocks`` (outer, C, inner), over batch
    ``pieces`` on the workers (their sums added in piece order). With ``gate`` (rows
    like ``u2``), ``u`` is first ReLU's gradient gate, ``u * (gate > 0)``."""
    gated = gate is not None
    g2 = gate if gated else u2

    def piece(i, j):
        out = np.zeros((2, blocks[1]))
        sums(u2[i:j], ku, v2[i:j], kv, g2[i:j], gated, *blocks, out)
        return out

    parts = workers.run_pieces(piece, pieces)
    total = parts[0]
    for p in parts[1:]:
        total += p
    return total


def first_rows_mean(x2: Any, blocks: tuple) -> Any:
    """Per-channel float64 mean of the first ``_SHIFT_ROWS`` samples, by the sums kernel
    (numpy's mean over three axes with a float64 accumulator took 230 us on 8 NHWC
    samples of 16x32x32, more than both forward kernels on 16 samples together)."""
    first = x2[:_SHIFT_ROWS]
    zero = np.zeros(first.shape[1], first.dtype)
    out = np.zeros((2, blocks[1]))
    sums(first, zero, first, zero, first, False, *blocks, out)
    return out[0] / (len(first) * blocks[0] * blocks[2])


@helper
def gated(u, g, on, one, zero):  # pragma: no cover (compiled into the kernels)
    """ReLU's gradient gate: ``u * (g > 0)`` when ``on`` (as the ReLU operator computes
    it, so a gated kernel gives the bits of the two operators in turn), else ``u``;
    ``one`` and ``zero`` are of ``u``'s dtype."""
    if not on:
        return u
    return u * (one if g > zero else zero)


@kernel
def sums(u, ku, v, kv, gate, on, outer, chans, inner, out):  # pragma: no cover (compiled)
    """``out[0, c] += sum(u - ku)``, ``out[1, c] += sum((u - ku) * (v - kv))`` over channel
    c's cells of the rows ``u`` and ``v`` (laid out (outer, chans, inner) along a row),
    ``u`` gated by ``gate`` when ``on`` (:func:`gated`)."""
    # out[0, c] += sum(u - ku), out[1, c] += sum((u - ku) * (v - kv)) over channel c's
    # cells; four rows at a time, so the running sums are loaded and stored once per four
    rows, width = u.shape
    s = np.empty(width, u.dtype)
    t = np.empty(width, u.dtype)
    one, zero = u.dtype.type(1), u.dtype.type(0)
    for r0 in range(0, rows, _BLOCK):
        r1 = min(r0 + _BLOCK, rows)
        s[:] = 0
        t[:] = 0
        r = r0
        while r + 4 <= r1:
            u0, u1, u2, u3 = u[r], u[r + 1], u[r + 2], u[r + 3]
            g0, g1, g2, g3 = gate[r], gate[r + 1], gate[r + 2], gate[r + 3]
            v0, v1, v2, v3 = v[r], v[r + 1], v[r + 2], v[r + 3]
            for j in range(width):
                a, b = ku[j], kv[j]
                d0 = gated(u0[j], g0[j], on, one, zero) - a
                d1 = gated(u1[j], g1[j], on, one, zero) - a
                d2 = gated(u2[j], g2[j], on, one, zero) - a
                d3 = gated(u3[j], g3[j], on, one, zero) - a
                s[j] += (d0 + d1) + (d2 + d3)
                t[j] += (d0 * (v0[j] - b) + d1 * (v1[j] - b)) + (d2 * (v2[j] - b) + d3 * (v3[j] - b))
            r += 4
        for rest in range(r, r1):
            for j in range(width):
                d0 = gated(u[rest, j], gate[rest, j], on, one, zero) - ku[j]
                s[j] += d0
                t[j] += d0 * (v[rest, j] - kv[j])
        # the block's sums, laid out (outer, chans, inner) along a row, into out (2, chans)
        for o in range(outer):
            base = o * chans * inner
            if inner == 1:
                for c in range(chans):
                    out[0, c] += s[base + c]
                    out[1, c] += t[base + c]
            else:
                for c in range(chans):
                    for i in range(base + c * inner, base + (c + 1) * inner):
                        out[0, c] += s[i]
                        out[1, c] += t[i]


@helper
def relu_if(v, on, zero):  # pragma: no cover (compiled into the kernels)
    """``max(v, 0)`` as the ReLU operator computes it (NaN stays, -0.0 becomes 0) when
    ``on``, else ``v``; ``zero`` is of ``v``'s dtype."""
    if not on:
        return v
    return zero if v <= zero else v


@helper
def plus_if(v, w, on):  # pragma: no cover (compiled into the kernels)
    """``v + w`` when ``on`` (a residual added to BatchNorm's output), else ``v``."""
    return v + w if on else v


@kernel
def normalise(x, m, a, b, res, add, relu, y):  # pragma: no cover (compiled)
    """``y = (x - m) * a + b`` on rows, the coefficients spread along a row, plus the
    rows ``res`` when ``add``, then ReLU when ``relu`` (:func:`relu_if`): one pass where
    BatchNorm, the residual sum and ReLU in turn make three."""
    # four rows at a time (one load of the coefficients per four)
    rows, width = x.shape
    z = y.dtype.type(0)
    r = 0
    while r + 4 <= rows:
        x0, x1, x2, x3 = x[r], x[r + 1], x[r + 2], x[r + 3]
        r0, r1, r2, r3 = res[r], res[r + 1], res[r + 2], res[r + 3]
        y0, y1, y2, y3 = y[r], y[r + 1], y[r + 2], y[r + 3]
        for j in range(width):
            mj, aj, bj = m[j], a[j], b[j]
            y0[j] = relu_if(plus_if((x0[j] - mj) * aj + bj, r0[j], add), relu, z)
            y1[j] = relu_if(plus_if((x1[j] - mj) * aj + bj, r1[j], add), relu, z)
            y2[j] = relu_if(plus_if((x2[j] - mj) * aj + bj, r2[j], add), relu, z)
            y3[j] = relu_if(plus_if((x3[j] - mj) * aj + bj, r3[j], add), relu, z)
        r += 4
    for rest in range(r, rows):
        for j in range(width):
            y[rest, j] = relu_if(plus_if((x[rest, j] - m[j]) * a[j] + b[j], res[rest, j], add), relu, z)


@kernel
def input_grad(dy, x, m, a, kx, k0, train, gate, on, dx):  # pragma: no cover (compiled)
    """BatchNorm's input gradient on rows: ``dx = a * dy + kx * (x - m) + k0`` in
    training, ``a * dy`` in evaluation, ``dy`` gated by ``gate`` when ``on``
    (:func:`gated`)."""
    rows, width = dy.shape
    one, zero = dy.dtype.type(1), dy.dtype.type(0)
    for r in range(rows):
        g, xr, d, gr = dy[r], x[r], dx[r], gate[r]
        if train:
            for j in range(width):
                d[j] = (gated(g[j], gr[j], on, one, zero) * a[j] + (xr[j] - m[j]) * kx[j]) + k0[j]
        else:
            for j in range(width):
                d[j] = gated(g[j], gr[j], on, one, zero) * a[j]
