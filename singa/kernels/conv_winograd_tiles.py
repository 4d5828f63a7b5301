"""F(4x4, 3x3)'s tile transforms of a batch slice, in long passes over whole samples.

A 3x3 Winograd convolution (:mod:`conv_winograd`, :mod:`conv_winograd_grad`) transforms
four things: the input's tiles ``V = B^T d B`` (6x6 tiles overlapping by two pixels; in
the forward, and again for the filters' gradient), the products back to the output
``Y = A^T M A`` (4x4 blocks), the output gradient's blocks ``dM = A dY A^T``, and the
tiles' gradients back to the input's, ``B dV B^T`` added where the tiles overlap. Each
is separable: a pass along the tiles' columns, then one along their rows, each an
elementwise combination of runs of memory.

What this saves. The row-by-row kernels of :mod:`conv_winograd` made each row of tiles
in calls over runs of (tiles of a row) x channels: 128 floats on every stage of
ResNet-20, too short for numba's vector loops to pay for their set-up (0.5 ns per output
float, against 0.2 ns on runs of thousands), and went through phased, zero-padded copies
of the input and of the input's gradient. Here a sample is first gathered so that every
source of a pass is one contiguous run (each column of a tile in its own copy, so the
columns that neighbouring tiles share are copied twice: 1.5x the sample), each pass is a
few calls over the whole sample (the gathered sample and its first pass stay in the
cache for the second), and the way back writes each output pixel once. Measured on one
core (best of 15, load 0.6-1.6), ResNet-20's stages at batch slices of 4, 16 and 64
samples (16, 32, 64 channels on 32x32, 16x16, 8x8), us, row-by-row -> here:

============================  =================  =================  =================
transform                     stage 1            stage 2            stage 3
============================  =================  =================  =================
input's tiles (with gather)   177-210 -> 125     401-415 -> 254-305 839-877 -> 682-694
output gradient's blocks      169-187 -> 101-115 372-385 -> 249-257 756-788 -> 631-642
back to the output            86-127 -> 61-82    148-178 -> 154-165 321-397 -> 301-350
back to the input's gradient  152-194 -> 136-190 392-418 -> 207-302 842-924 -> 525-624
============================  =================  =================  =================

The tile order (sample, tile row, tile column) and layouts are those of the row-by-row
kernels. The output gradient's blocks and the way back to the output give their bits;
the input's tiles differ in the order of the two passes (columns first) and the input's
gradient in the order of the overlap sums, both within float32 roundings.

The filters are transformed here too, ``U = G g G^T`` (:func:`filters`), on every
training call since they change every step: G along the filter's rows, then along its
columns (162 multiply-adds a filter against 324 as one product with G (x) G), written
straight into the layout the products read, on the workers. It replaced a transposed
copy of the filters and one float32 product with G (x) G (plus a transposed copy of
the result for the backward), which ran on one core: in ResNet-18's training step
(batch 32) 19 ms of about 600, 4.3 ms a call for 256 x 256 filters.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.kernels import workers
from singa.kernels.buffers import scratch
from singa.kernels.jit import helper, kernel

__all__ = ["input_tiles", "grad_tiles", "output_tiles", "input_grad", "filters"]

TILE = 4
_A = 6
_FILTER_RUN = 4096  # floats per run of the filters' transform (27 runs stay in the cache)


def input_tiles(xh: Any, top: int, left: int, th: int, tw: int) -> Any:
    """``V = B^T d B`` of F(4x4, 3x3), (36, N*th*tw, C) in a pooled array, for the
    th x tw tiles d (6x6, overlapping by two) of ``xh`` (N, H, W, C) zero-padded by
    ``top`` and ``left`` (and below and right as far as the tiles reach)."""
    n, c = xh.shape[0], xh.shape[3]
    g = scratch(np, (_A, TILE, th + 1, tw, c), xh.dtype)  # one sample's, reused
    f = scratch(np, g.shape, xh.dtype)
    v = scratch(np, (_A * _A, n * th * tw, c), xh.dtype)
    _input_tiles(np.ascontiguousarray(xh), top, left, g, f.reshape(_A, -1), v.reshape(_A * _A, -1))
    return v


def grad_tiles(dyh: Any, th: int, tw: int) -> Any:
    """``dM = A dY A^T`` of F(4x4, 3x3), (36, N*th*tw, O) in a pooled array, for the
    th x tw disjoint 4x4 blocks dY of ``dyh`` (N, OH, OW, O), zero beyond its edge."""
    n, o = dyh.shape[0], dyh.shape[3]
    g = scratch(np, (TILE * TILE, th, tw, o), dyh.dtype)  # one sample's, reused
    f = scratch(np, (_A * TILE, th * tw * o), dyh.dtype)
    dm = scratch(np, (_A * _A, n * th * tw, o), dyh.dtype)
    _grad_tiles(np.ascontiguousarray(dyh), g, f, dm.reshape(_A * _A, -1))
    return dm


def output_tiles(prod: Any, th: int, tw: int, y: Any) -> None:
    """``y`` (N, OH, OW, O), C-contiguous, = ``A^T M A`` of F(4x4, 3x3) for each tile's
    products M in ``prod`` (36, N*th*tw, O), cropped where the tiles overhang."""
    o = y.shape[3]
    f = scratch(np, (_A * TILE, th * tw * o), y.dtype)  # one sample's, reused
    z = scratch(np, (TILE * TILE, th, tw, o), y.dtype)
    _output_tiles(prod.reshape(_A * _A, -1), f, z, y)


def input_grad(dv: Any, th: int, tw: int, top: int, left: int, dxh: Any) -> None:
    """``dxh`` (N, H, W, C), C-contiguous, = the input gradient from the tiles' gradients
    ``dv`` (36, N*th*tw, C): ``B dV B^T`` of each 6x6 tile, the tiles padded by ``top``
    and ``left`` and overlapping by two, the (up to four) tiles over each pixel added."""
    c = dxh.shape[3]
    g = scratch(np, (_A * _A, th * tw * c), dxh.dtype)  # one sample's, reused
    t = scratch(np, (_A * _A, th, tw, c), dxh.dtype)
    _input_grad(dv.reshape(_A * _A, -1), top, left, g, t, dxh)


def filters(W: Any, transposed: bool = False) -> Any:
    """``U = G g G^T`` of F(4x4, 3x3) for each 3x3 filter g of the float32 ``W`` (O, C,
    3, 3): a new array (36, C, O), what the forward's products read, or (36, O, C) when
    ``transposed`` (the backward's dV = dM U^T), in pieces of its second axis on the
    workers."""
    taps = W if transposed else W.transpose(1, 0, 2, 3)
    rows, cols = taps.shape[:2]
    out = np.empty((_A * _A, rows, cols), W.dtype)
    # each filter's 9 taps are read and its 36 values written
    pieces = workers.work_pieces(rows, 5 * W.size)
    workers.run_pieces(lambda i0, i1: _filters(taps, out, i0, i1), pieces)
    return out


@kernel
def _filters(taps, out, i0, i1):  # pragma: no cover (compiled)
    """out[p*6 + q, i, j] = (G taps[i, j] G^T)[p, q] for i in [i0, i1), a block of i at a
    time: the block's taps gathered as 9 runs over (i, j), G applied along the filters'
    rows (a[p*3 + s] = G[p] . column s), then along their columns into out's runs."""
    n = taps.shape[1]
    step = max(1, _FILTER_RUN // n)
    t = np.empty((9, step * n), taps.dtype)
    a = np.empty((18, step * n), taps.dtype)
    o2 = out.reshape(out.shape[0], out.shape[1] * n)
    for b0 in range(i0, i1, step):
        b1 = min(i1, b0 + step)
        m, e, f = (b1 - b0) * n, b0 * n, b1 * n
        for i in range(b0, b1):
            for j in range(n):
                for r in range(3):
                    for s in range(3):
                        t[3 * r + s, (i - b0) * n + j] = taps[i, j, r, s]
        for s in range(3):
            _rows_g(t[s, :m], t[3 + s, :m], t[6 + s, :m], a[s, :m], a[3 + s, :m], a[6 + s, :m],
                    a[9 + s, :m], a[12 + s, :m], a[15 + s, :m])  # fmt: skip
        for p in range(6):
            b = 6 * p
            _rows_g(a[3 * p, :m], a[3 * p + 1, :m], a[3 * p + 2, :m], o2[b, e:f], o2[b + 1, e:f],
                    o2[b + 2, e:f], o2[b + 3, e:f], o2[b + 4, e:f], o2[b + 5, e:f])  # fmt: skip


# A sample at a time (its gathered copy and first pass stay in the cache for the second):
# first a gather that puts each source of the passes in one run, then the two passes.
@helper
def _gather_columns(x, n, top, left, g):  # pragma: no cover (compiled)
    """g (6, 4, th + 1, tw, C): ``g[j, r % 4, r // 4, tx] = x[n, r - top, tx*4 + j - left]``
    for the padded rows r < 4*(th + 1), zero outside x: column j of every tile (each with
    its own copy of the columns it shares), the rows in phases of four."""
    h, w, c = x.shape[1:]
    rows, tw = g.shape[1] * g.shape[2], g.shape[3]
    for j in range(g.shape[0]):
        for r in range(rows):
            yy = r - top
            r4, rq = r % 4, r // 4
            for tx in range(tw):
                xx = tx * 4 + j - left
                if 0 <= yy < h and 0 <= xx < w:
                    for ch in range(c):
                        g[j, r4, rq, tx, ch] = x[n, yy, xx, ch]
                else:
                    for ch in range(c):
                        g[j, r4, rq, tx, ch] = 0


@helper
def _gather_blocks(x, n, g):  # pragma: no cover (compiled)
    """g (16, th, tw, O): ``g[j*4 + i, ty, tx] = x[n, ty*4 + i, tx*4 + j]``, zero beyond x:
    pixel (i, j) of every 4x4 block in one run."""
    h, w, c = x.shape[1:]
    th, tw = g.shape[1], g.shape[2]
    for j in range(4):
        for i in range(4):
            for ty in range(th):
                yy = ty * 4 + i
                for tx in range(tw):
                    xx = tx * 4 + j
                    if yy < h and xx < w:
                        for ch in range(c):
                            g[j * 4 + i, ty, tx, ch] = x[n, yy, xx, ch]
                    else:
                        for ch in range(c):
                            g[j * 4 + i, ty, tx, ch] = 0


# The passes. Each call of a row helper combines whole runs (a slice's or a sample's),
# where the row-by-row kernels made 128-float runs.
@kernel
def _input_tiles(x, top, left, g, f, v):  # pragma: no cover (compiled)
    """v[k1*6 + k2] = (B^T d B)[k1, k2] of every tile d, a sample at a time: the gather,
    f[k] = B^T[k] . g[0..5] along the tiles' columns, then B^T[k1] . (rows 0..5 of f[k2]'s
    tiles) along their rows; f[k2] is (4, th + 1, tw*C), so padded row ty*4 + i of every
    tile row ty (phase i % 4, from tile row i // 4 on) is one run."""
    g2 = g.reshape(g.shape[0], -1)
    phase = f.shape[1] // 4
    step = g.shape[3] * g.shape[4]  # a tile row, tw*C
    run = v.shape[1] // x.shape[0]
    for n in range(x.shape[0]):
        _gather_columns(x, n, top, left, g)
        _rows_bt6(g2[0], g2[1], g2[2], g2[3], g2[4], g2[5], f[0], f[1], f[2], f[3], f[4], f[5])
        o, e = n * run, (n + 1) * run
        for k2 in range(6):
            src, b2, b3 = f[k2], 2 * phase, 3 * phase
            d4, d5 = src[step : step + run], src[phase + step : phase + step + run]
            _rows_bt6(
                src[:run], src[phase : phase + run], src[b2 : b2 + run], src[b3 : b3 + run], d4, d5,
                v[k2, o:e], v[6 + k2, o:e], v[12 + k2, o:e],
                v[18 + k2, o:e], v[24 + k2, o:e], v[30 + k2, o:e],
            )  # fmt: skip


@kernel
def _grad_tiles(x, g, f, dm):  # pragma: no cover (compiled)
    """dm[p*6 + q] = (A dY A^T)[p, q] of every block dY, a sample at a time: the gather,
    f[q*4 + i] = A[q] . g[0..3, i] along the blocks' columns, then dm[p*6 + q] =
    A[p] . f[q*4 + 0..3] along their rows."""
    g2 = g.reshape(g.shape[0], -1)
    run = g2.shape[1]
    for n in range(x.shape[0]):
        _gather_blocks(x, n, g)
        for i in range(4):
            _rows_a(g2[i], g2[4 + i], g2[8 + i], g2[12 + i],
                    f[i], f[4 + i], f[8 + i], f[12 + i], f[16 + i], f[20 + i])  # fmt: skip
        o, e = n * run, (n + 1) * run
        for q in range(6):
            b = q * 4
            _rows_a(f[b], f[b + 1], f[b + 2], f[b + 3], dm[q, o:e], dm[6 + q, o:e], dm[12 + q, o:e],
                    dm[18 + q, o:e], dm[24 + q, o:e], dm[30 + q, o:e])  # fmt: skip


# The way back, a sample at a time: both passes over the sample's runs, then each pixel
# written once from the (cropped) tiles over it, where the row-by-row kernels made runs
# of a tile row and went through a zeroed, phased copy of the output.
@kernel
def _output_tiles(prod, f, z, y):  # pragma: no cover (compiled)
    """y[n] = (A^T M A) of each tile: f[k1*4 + j] = A^T[j] . prod[k1*6 + 0..5] along the
    columns, z[i*4 + j] = A^T[i] . f[0..5 (*4) + j] along the rows, then the pixels."""
    n_, oh, ow, o = y.shape
    th, tw = z.shape[1], z.shape[2]
    run = th * tw * o
    z2 = z.reshape(16, run)
    for n in range(n_):
        a, e = n * run, (n + 1) * run
        for k1 in range(6):
            b = k1 * 6
            r = k1 * 4
            _rows_at6(prod[b, a:e], prod[b + 1, a:e], prod[b + 2, a:e], prod[b + 3, a:e], prod[b + 4, a:e],
                      prod[b + 5, a:e], f[r], f[r + 1], f[r + 2], f[r + 3])  # fmt: skip
        for j in range(4):
            _rows_at6(f[j], f[4 + j], f[8 + j], f[12 + j], f[16 + j], f[20 + j],
                      z2[j], z2[4 + j], z2[8 + j], z2[12 + j])  # fmt: skip
        for yy in range(oh):
            for xx in range(ow):
                src = z[(yy % 4) * 4 + xx % 4, yy // 4, xx // 4]
                out = y[n, yy, xx]
                for ch in range(o):
                    out[ch] = src[ch]


@kernel
def _input_grad(dv, top, left, g, t, dx):  # pragma: no cover (compiled)
    """dx[n] from the tiles' gradients: g[p*6 + j] = B[j] . dv[p*6 + 0..5] along the
    columns, t[i*6 + j] = B[i] . g[0..5 (*6) + j] along the rows, then each pixel the
    sum of the tiles over it (its own tile, the one left, above, above left)."""
    n_, h, w, c = dx.shape
    th, tw = t.shape[1], t.shape[2]
    run = th * tw * c
    t2 = t.reshape(36, run)
    for n in range(n_):
        a, e = n * run, (n + 1) * run
        for p in range(6):
            b = p * 6
            _rows_b(dv[b, a:e], dv[b + 1, a:e], dv[b + 2, a:e], dv[b + 3, a:e], dv[b + 4, a:e],
                    dv[b + 5, a:e], g, b, 1)  # fmt: skip
        for j in range(6):
            _rows_b(g[j], g[6 + j], g[12 + j], g[18 + j], g[24 + j], g[30 + j], t2, j, 6)
        for yy in range(h):
            ty, i = (yy + top) // 4, (yy + top) % 4
            own_r, up = ty < th, i < 2 and ty >= 1
            for xx in range(w):
                tx, j = (xx + left) // 4, (xx + left) % 4
                own_c, lf = tx < tw, j < 2 and tx >= 1
                out = dx[n, yy, xx]
                # the sum of pixel (i, j) of tile (ty, tx) and its overlaps: (i, j + 4) of
                # the tile left, (i + 4, j) above, (i + 4, j + 4) above left, where those
                # exist (the same conditions for every channel: numba keeps them outside)
                for ch in range(c):
                    acc = np.float32(0)
                    if own_r and own_c:
                        acc += t[i * 6 + j, ty, tx, ch]
                    if own_r and lf:
                        acc += t[i * 6 + j + 4, ty, tx - 1, ch]
                    if up and own_c:
                        acc += t[(i + 4) * 6 + j, ty - 1, tx, ch]
                    if up and lf:
                        acc += t[(i + 4) * 6 + j + 4, ty - 1, tx - 1, ch]
                    out[ch] = acc


@helper
def _rows_g(s0, s1, s2, o0, o1, o2, o3, o4, o5):  # pragma: no cover (compiled)
    """o_q = G[q] . (s0, s1, s2) elementwise, F(4x4, 3x3)'s G rows (1/4, 0, 0),
    -(1, 1, 1)/6, -(1, -1, 1)/6, (1/24, 1/12, 1/6), (1/24, -1/12, 1/6), (0, 0, 1)."""
    q, s6 = np.float32(0.25), np.float32(1 / 6)
    s12, s24 = np.float32(1 / 12), np.float32(1 / 24)
    for u in range(s0.size):
        e = s0[u] + s2[u]
        f = s24 * s0[u] + s6 * s2[u]
        g = s12 * s1[u]
        o0[u] = q * s0[u]
        o1[u] = -s6 * (e + s1[u])
        o2[u] = -s6 * (e - s1[u])
        o3[u] = f + g
        o4[u] = f - g
        o5[u] = s2[u]


@helper
def _rows_bt6(d0, d1, d2, d3, d4, d5, o0, o1, o2, o3, o4, o5):  # pragma: no cover (compiled)
    """o_k = B^T[k] . (d0, ..., d5) elementwise, F(4x4, 3x3)'s B^T rows (4, 0, -5, 0,
    1, 0), (0, -4, -4, 1, 1, 0), (0, 4, -4, -1, 1, 0), (0, -2, -1, 2, 1, 0), (0, 2, -1, -2,
    1, 0), (0, 4, 0, -5, 0, 1). float32 constants keep the arithmetic in float32."""
    f2, f4, f5 = np.float32(2), np.float32(4), np.float32(5)
    for u in range(o0.size):
        e1 = d4[u] - f4 * d2[u]
        q1 = d3[u] - f4 * d1[u]
        e2 = d4[u] - d2[u]
        q2 = f2 * (d3[u] - d1[u])
        o0[u] = f4 * d0[u] - f5 * d2[u] + d4[u]
        o1[u] = e1 + q1
        o2[u] = e1 - q1
        o3[u] = e2 + q2
        o4[u] = e2 - q2
        o5[u] = f4 * d1[u] - f5 * d3[u] + d5[u]


@helper
def _rows_a(s0, s1, s2, s3, o0, o1, o2, o3, o4, o5):  # pragma: no cover (compiled)
    """o_q = A[q] . (s0, s1, s2, s3) elementwise, A = (A^T)^T of F(4x4, 3x3): rows
    (1, 0, 0, 0), (1, 1, 1, 1), (1, -1, 1, -1), (1, 2, 4, 8), (1, -2, 4, -8), (0, 0, 0, 1)."""
    f2, f4, f8 = np.float32(2), np.float32(4), np.float32(8)
    for u in range(s0.size):
        e1 = s0[u] + s2[u]
        q1 = s1[u] + s3[u]
        e2 = s0[u] + f4 * s2[u]
        q2 = f2 * s1[u] + f8 * s3[u]
        o0[u] = s0[u]
        o1[u] = e1 + q1
        o2[u] = e1 - q1
        o3[u] = e2 + q2
        o4[u] = e2 - q2
        o5[u] = s3[u]


@helper
def _rows_at6(s0, s1, s2, s3, s4, s5, o0, o1, o2, o3):  # pragma: no cover (compiled)
    """o_i = A^T[i] . (s0, ..., s5) elementwise, F(4x4, 3x3)'s A^T rows (1, 1, 1, 1, 1, 0),
    (0, 1, -1, 2, -2, 0), (0, 1, 1, 4, 4, 0), (0, 1, -1, 8, -8, 1)."""
    f2, f4, f8 = np.float32(2), np.float32(4), np.float32(8)
    for u in range(o0.size):
        a1 = s1[u] + s2[u]
        b1 = s1[u] - s2[u]
        a2 = s3[u] + s4[u]
        b2 = s3[u] - s4[u]
        o0[u] = s0[u] + a1 + a2
        o1[u] = b1 + f2 * b2
        o2[u] = a1 + f4 * a2
        o3[u] = b1 + f8 * b2 + s5[u]


@helper
def _rows_b(s0, s1, s2, s3, s4, s5, out, row, stride):  # pragma: no cover (compiled)
    """out[row + j*stride] = B[j] . (s0, ..., s5) elementwise, B = (B^T)^T of F(4x4, 3x3):
    rows (4, 0, 0, 0, 0, 0), (0, -4, 4, -2, 2, 4), (-5, -4, -4, -1, -1, 0), (0, 1, -1, 2,
    -2, -5), (1, 1, 1, 1, 1, 0), (0, 0, 0, 0, 0, 1)."""
    f2, f4, f5 = np.float32(2), np.float32(4), np.float32(5)
    o0, o1, o2 = out[row], out[row + stride], out[row + 2 * stride]
    o3, o4, o5 = out[row + 3 * stride], out[row + 4 * stride], out[row + 5 * stride]
    for u in range(s0.size):
        a12 = s1[u] + s2[u]
        d12 = s2[u] - s1[u]
        a34 = s3[u] + s4[u]
        d34 = s4[u] - s3[u]
        o0[u] = f4 * s0[u]
        o1[u] = f4 * d12 + f2 * d34 + f4 * s5[u]
        o2[u] = -f5 * s0[u] - f4 * a12 - a34
        o3[u] = -d12 - f2 * d34 - f5 * s5[u]
        o4[u] = s0[u] + a12 + a34
        o5[u] = s5[u]
