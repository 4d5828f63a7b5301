"""Winograd convolution F(4x4, r x r) for evaluation with fixed filters.

A stride-1 r x r convolution (r = 3 or 5) makes each 4 x 4 block of outputs from an
a x a tile of the input (a = 4 + r - 1, tiles overlapping by r - 1) in three steps:

1. the tile is transformed, ``V = B^T d B`` (d: a x a, one per channel);
2. for each of the a*a positions of the transformed tile, one matrix product over
   the channels, ``M[p] = V[p] @ U[p]`` (tiles, C) @ (C, O), where ``U = G g G^T`` are
   the filters transformed once (:func:`transform_filters`);
3. the outputs come back as ``Y = A^T M A`` (4 x 4 per tile and output channel).

That takes a*a multiply-adds per 16 outputs and channel pair against 16*r*r for the
column product of :mod:`singa.autograd.conv`: 2.25x fewer for 3 x 3 filters, 6.25x
for 5 x 5. The transforms are small products too (with B^T and A^T, a x a and 4 x a),
so every step runs as a numpy product on one BLAS thread per batch slice, the slices
on :mod:`singa.autograd.workers`. The matrices come from the Cook-Toom construction on
the points 0, +-1, +-2 (and +-1/2 for 5 x 5), which are exact in binary.

The roundings differ from the column product's: the results match a float64
convolution to a few float32 ulps of the output's scale (measured: relative error
2-5e-6 of the largest output, against 4-6e-7 for the column product). So only the
inference graphs that fold weights use it (``fold_batchnorm``: :mod:`singa.model.inference`),
never training or exact evaluation.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from singa.autograd import workers
from singa.autograd.buffers import scratch
from singa.autograd.conv_epilogue import Epilogue
from singa.autograd.jit import kernel

__all__ = ["TILE", "matrices", "suits", "fits", "transform_filters", "forward"]

#: outputs per tile side, m of F(m x m, r x r)
TILE = 4
_POINTS = (0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5)
# filter sizes taken, and the fewest channels for which the transforms pay: the
# MNIST CNN's first layer (one channel) stays a column product
_SIZES = (3, 5)
_MIN_CHANNELS = 8
# a batch slice's transformed tiles and their products (a*a*tiles*(C + O) floats) stay
# within about this many bytes, in the cache between the steps
_SLICE_BYTES = 1 << 20


@functools.cache
def matrices(r: int, m: int = TILE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A^T, G, B^T)`` of F(m, r) in float64, shapes (m, a), (a, r), (a, a) with
    a = m + r - 1: for a length-a signal d and a length-r filter g, the valid
    correlation is ``A^T ((G g) * (B^T d))``."""
    a = m + r - 1
    p = np.array(_POINTS[: a - 1])
    if len(p) != a - 1:
        raise ValueError(f"Winograd F({m}, {r}) needs {a - 1} points, there are {len(_POINTS)}")
    at = np.zeros((m, a))
    at[:, : a - 1] = p[None, :] ** np.arange(m)[:, None]
    at[m - 1, a - 1] = 1.0
    others = [np.delete(p, j) for j in range(a - 1)]
    f = np.array([np.prod(p[j] - o) for j, o in enumerate(others)])
    g = np.zeros((a, r))
    g[: a - 1] = p[:, None] ** np.arange(r)[None, :] / f[:, None]
    g[a - 1, r - 1] = 1.0
    # row j: the coefficients (lowest power first) of prod over the other points of (x - p);
    # the last row: of prod over all points
    bt = np.zeros((a, a))
    for j, o in enumerate([*others, p]):
        coef = np.poly(o)[::-1]
        bt[j, : len(coef)] = coef
    return at, g, bt


def suits(conv: Any, W: Any) -> bool:
    """Whether the convolution operator ``conv`` with filters ``W`` (O, C, r, r) can
    run as F(4x4, r x r): float32 numpy filters of 3 x 3 or 5 x 5, stride 1, no
    dilation or groups, and at least ``_MIN_CHANNELS`` input and output channels."""
    return (
        isinstance(W, np.ndarray)
        and W.dtype == np.float32
        and W.ndim == 4
        and W.shape[2] == W.shape[3] in _SIZES
        and tuple(conv.kernel_size) == W.shape[2:]
        and tuple(conv.stride) == (1, 1)
        and tuple(conv.dilation) == (1, 1)
        and conv.groups == 1
        and min(W.shape[:2]) >= _MIN_CHANNELS
    )


def fits(conv: Any, x: Any, U: Any) -> bool:
    """Whether input ``x`` can run through the filters ``U`` of :func:`transform_filters`:
    a float32 numpy input with their channels and an output of at least a tile a side."""
    if not isinstance(x, np.ndarray) or x.dtype != U.dtype or x.ndim != 4 or x.shape[1] != U.shape[1]:
        return False
    oh, ow = conv.output_shape(x.shape, (U.shape[2], U.shape[1], *conv.kernel_size))[2:]
    return min(oh, ow) >= TILE


def transform_filters(W: Any) -> np.ndarray:
    """The filters ``W`` (O, C, r, r) transformed, ``U[p] = (G W G^T)[p]`` for the a*a
    positions p, as (a*a, C, O) in W's dtype (computed in float64)."""
    o, c, r, _ = W.shape
    _, g, _ = matrices(r)
    a = g.shape[0]
    u = np.einsum("ak,ockl,bl->abco", g, np.asarray(W, np.float64), g)
    return np.ascontiguousarray(u.reshape(a * a, c, o), dtype=W.dtype)


def forward(
    conv: Any,
    x: Any,
    U: Any,
    b: Any = None,
    *,
    relu: bool = False,
    residual: Any = None,
    pool: Any = None,
    affine: Any = None,
) -> Any:
    """The convolution ``conv`` (its padding and output shape) of ``x`` (N, C, H, W),
    any layout, with the transformed filters ``U``, then the bias ``b`` and the
    eval-only steps of :class:`~singa.autograd.conv_epilogue.Epilogue` (see
    :meth:`singa.autograd.conv.Conv2d.forward`), a batch slice at a time on the
    workers. Returns (N, O, OH, OW), NCHW with NHWC memory, like the column product."""
    n, c = x.shape[:2]
    o, r = U.shape[2], conv.kernel_size[0]
    oh, ow = conv.output_shape(x.shape, (o, c, r, r))[2:]
    th, tw = -(-oh // TILE), -(-ow // TILE)
    at, bt = _matrices_as(r, x.dtype)
    a = bt.shape[0]
    y2 = scratch(np, (n * oh * ow, o), x.dtype)
    epi = Epilogue(
        np, (n, oh, ow, o), x.dtype, bias=b, relu=relu, residual=residual, pool=pool, affine=affine
    )
    xh = x.transpose(0, 2, 3, 1)
    top, left = conv.pads[:2]

    rows, q = th * TILE + a - TILE, tw + -(-(a - TILE) // TILE)  # the input rows and phases the tiles read

    def piece(i0: int, i1: int) -> None:
        tiles = (i1 - i0) * th * tw
        phased = scratch(np, (i1 - i0, rows, TILE, q, c), x.dtype)
        _phase(np.ascontiguousarray(xh[i0:i1]), TILE, top, left, phased)
        v = scratch(np, (a * a, tiles, c), x.dtype)
        _tiles_in(phased, bt, TILE, th, tw, v.reshape(a * a, -1))
        prod = scratch(np, (a * a, tiles, o), x.dtype)
        np.matmul(v, U, out=prod)
        out = y2[i0 * oh * ow : i1 * oh * ow]
        _tiles_out(prod.reshape(a * a, -1), at, th, tw, out.reshape(i1 - i0, oh, ow, o))
        epi(out, i0, i1)

    count = -(-n * a * a * th * tw * (c + o) * x.itemsize // _SLICE_BYTES)
    workers.run_pieces(piece, workers.even_pieces(n, count + (count > 1 and count % 2)))
    return epi.output(y2)


@functools.cache
def _matrices_as(r: int, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(A^T, B^T)`` of F(TILE, r) in ``dtype`` (their entries are exact in binary)."""
    at, _, bt = matrices(r)
    return at.astype(dtype), bt.astype(dtype)


# The transforms loop over long contiguous runs, a row of tiles at a time: numba's
# vector loops need about 32 iterations, so a loop over 16 channels would run scalar.
# The input's columns are first laid out in TILE phases (padded column q*TILE + s at
# [s, q]), so that column j of every tile of the row is one run ([j % TILE, j // TILE:]).
@kernel
def _phase(x, m, top, left, out):  # pragma: no cover (compiled)
    """out (n, rows, m, q, C): ``x`` (n, H, W, C) zero-padded by ``top`` and ``left`` (and
    below and right to out's size), padded column ``k*m + s`` at ``[:, :, s, k]``."""
    h, w, c = x.shape[1:]
    for n in range(x.shape[0]):
        for row in range(out.shape[1]):
            yy = row - top
            for s in range(m):
                for k in range(out.shape[3]):
                    xx = k * m + s - left
                    inside = 0 <= yy < h and 0 <= xx < w
                    for ch in range(c):
                        out[n, row, s, k, ch] = x[n, yy, xx, ch] if inside else 0


@kernel
def _tiles_in(phased, bt, m, th, tw, v):  # pragma: no cover (compiled)
    """v[k1*a + k2, tiles, :] = (B^T d B)[k1, k2] for each tile d of the input phased by
    :func:`_phase` (n, rows, m, q, C)."""
    a = bt.shape[0]
    q, c = phased.shape[3:]
    run = tw * c
    e = np.empty((a, m * q * c), phased.dtype)
    for n in range(phased.shape[0]):
        for ty in range(th):
            flat = phased[n, ty * m : ty * m + a].reshape(a, m * q * c)
            for k in range(a):  # along the rows: e[k] = sum over r of bt[k, r] * row r
                out = e[k]
                first = True
                for r in range(a):
                    b = bt[k, r]
                    if b != 0:
                        src = flat[r]
                        if first:
                            for u in range(out.size):
                                out[u] = b * src[u]
                        else:
                            for u in range(out.size):
                                out[u] += b * src[u]
                        first = False
            t0 = (n * th + ty) * run
            for k1 in range(a):  # along the columns, every tile of the row at once
                for k2 in range(a):
                    out = v[k1 * a + k2, t0 : t0 + run]
                    first = True
                    for j in range(a):
                        b = bt[k2, j]
                        if b != 0:
                            off = (j % m) * q * c + (j // m) * c
                            src = e[k1, off : off + run]
                            if first:
                                for u in range(run):
                                    out[u] = b * src[u]
                            else:
                                for u in range(run):
                                    out[u] += b * src[u]
                            first = False


@kernel
def _tiles_out(prod, at, th, tw, y):  # pragma: no cover (compiled)
    """y (n, OH, OW, O) = (A^T M A) of each tile's products M in ``prod`` (a*a,
    tiles*O), cropped where the tiles overhang, a row of tiles at a time."""
    m, a = at.shape
    n_, oh, ow, o = y.shape
    run = tw * o
    f = np.empty((a, m * run), prod.dtype)
    z = np.empty((m, m, tw, o), prod.dtype)
    zf = z.reshape(m, m * run)
    for n in range(n_):
        for ty in range(th):
            t0 = (n * th + ty) * run
            for k1 in range(a):  # along the columns
                for j in range(m):
                    out = f[k1, j * run : (j + 1) * run]
                    first = True
                    for k2 in range(a):
                        b = at[j, k2]
                        if b != 0:
                            src = prod[k1 * a + k2, t0 : t0 + run]
                            if first:
                                for u in range(run):
                                    out[u] = b * src[u]
                            else:
                                for u in range(run):
                                    out[u] += b * src[u]
                            first = False
            for i in range(m):  # along the rows
                out = zf[i]
                first = True
                for k1 in range(a):
                    b = at[i, k1]
                    if b != 0:
                        src = f[k1]
                        if first:
                            for u in range(out.size):
                                out[u] = b * src[u]
                        else:
                            for u in range(out.size):
                                out[u] += b * src[u]
                        first = False
            for i in range(min(m, oh - ty * m)):  # z[i, j, tx] is output pixel (ty*m + i, tx*m + j)
                for tx in range(tw):
                    for j in range(min(m, ow - tx * m)):
                        for ch in range(o):
                            y[n, ty * m + i, tx * m + j, ch] = z[i, j, tx, ch]
