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
for 5 x 5. The products go through numpy's BLAS; the transforms are compiled passes,
written out for each filter size: for 3 x 3 filters over whole samples
(:mod:`singa.kernels.conv_winograd_tiles`), for 5 x 5 over rows of tiles (the kernels
below say why); a batch slice at a time, the slices on :mod:`singa.kernels.workers`, each then
finished by the convolution's :class:`~singa.kernels.conv_epilogue.Epilogue`. The
matrices come from the Cook-Toom construction on the points 0, +-1, +-2 (and +-1/2 for
5 x 5), which are exact in binary; :func:`matrices` builds them, and the tests check the
written-out transforms against them.

The roundings differ from the column product's: the results match a float64
convolution to a few float32 ulps of the output's scale (measured: relative error
2-3e-6 of the largest output, against 3-4e-7 for the column product). Two users:
the inference graphs that fold weights (``fold_batchnorm``: :mod:`singa.model.inference`),
and the training forward of :class:`singa.autograd.conv.Conv2d` through
:func:`singa.kernels.conv_forward.forward_saving` (:func:`trains`), whose filters
change every step and are transformed by :func:`training_filters` (one float32
product). Exact evaluation (no gradient wanted) keeps the column product; the
backward of a 3x3 one is :mod:`singa.kernels.conv_winograd_grad`'s. ``SINGA_WINOGRAD_TRAINING=0``
turns the training use off. float32 only.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np

from singa.kernels import conv_winograd_tiles, workers
from singa.kernels.buffers import scratch
from singa.kernels.conv_epilogue import Epilogue
from singa.kernels.jit import helper, kernel

__all__ = [
    "TILE",
    "matrices",
    "suits",
    "fits",
    "transform_filters",
    "training_filters",
    "trains",
    "forward",
    "forward_padded",
    "input_tiles",
    "phase_columns",
    "batch_slices",
    "MIN_SLICE_TILES",
]

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
#: ... unless that leaves a slice fewer tiles than this: each of the a*a products of a
#: slice is (tiles, C) @ (C, O), and its packing of the C x O filters pays only over
#: enough rows. Deep layers have few tiles a sample (ResNet-18, batch 32, two workers:
#: 256 channels on 8x8, 4 tiles a sample, forward 9.7 ms in 10 slices, 7.7 in 2;
#: backward 33.9 in 16 slices, 21.8 in 2; 128 on 16x16 forward 9.5 -> 8.0 ms)
MIN_SLICE_TILES = 128


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
    u = (g @ np.asarray(W, np.float64) @ g.T).transpose(2, 3, 1, 0)  # (a, a, C, O)
    return np.ascontiguousarray(u, dtype=W.dtype).reshape(a * a, c, o)


@functools.cache
def _kron_g(r: int) -> np.ndarray:
    """``G (x) G`` (a*a, r*r) in float32: U[p] = sum_k (G (x) G)[p, k] * W[k] for the
    filter taps k in row-major order."""
    _, g, _ = matrices(r)
    return np.kron(g, g).astype(np.float32)


def training_filters(W: Any, transposed: bool = False) -> np.ndarray:
    """The float32 filters ``W`` (O, C, r, r) transformed as :func:`transform_filters`
    does, (a*a, C, O), or (a*a, O, C) when ``transposed``, in float32: a training step
    transforms its filters on every call (the float64 per-filter products took 0.8 ms for
    64 x 64 3x3 filters, 20 a ResNet-20 step). 3x3 filters take
    :func:`conv_winograd_tiles.filters` (one pass on the workers), 5x5 ones one float32
    product ``(G (x) G) @ W`` over the taps. The roundings are float32's (within an ulp
    or two of :func:`transform_filters`)."""
    o, c, r, _ = W.shape
    if r == 3:
        return conv_winograd_tiles.filters(W, transposed)
    taps = np.ascontiguousarray(W.transpose(2, 3, 1, 0)).reshape(r * r, c * o)
    u = (_kron_g(r) @ taps).reshape(-1, c, o)
    return np.ascontiguousarray(u.transpose(0, 2, 1)) if transposed else u


#: fewest input channels for the training forward (the products of fewer channels
#: are too short for the transforms to pay)
TRAINING_MIN_CHANNELS = 16


def trains(
    x: Any, W: Any, kernel_size: tuple, stride: tuple, pads: tuple, dilation: tuple, groups: int
) -> bool:
    """Whether the training forward of this convolution runs as F(4x4, r x r): float32
    numpy ``x`` and ``W`` (O, C, r, r) with r = 3 or 5 and at least
    :data:`TRAINING_MIN_CHANNELS` channels each way, stride 1, no dilation or groups,
    padding at most r - 1 a side, an output of at least a tile a side, a batch of at
    least half as many output tiles as the filters have channels, and
    ``SINGA_WINOGRAD_TRAINING`` not ``0``."""
    if not (isinstance(x, np.ndarray) and isinstance(W, np.ndarray)) or x.dtype != np.float32:
        return False
    if (
        W.dtype != np.float32
        or W.ndim != 4
        or x.ndim != 4
        or os.environ.get("SINGA_WINOGRAD_TRAINING") == "0"
    ):
        return False
    r = W.shape[2]
    if r not in _SIZES or tuple(kernel_size) != (r, r) or W.shape[3] != r or groups != 1:
        return False
    if tuple(stride) != (1, 1) or tuple(dilation) != (1, 1) or max(pads) > r - 1:
        return False
    n, c, h, w = x.shape
    if min(c, W.shape[0]) < TRAINING_MIN_CHANNELS or W.shape[1] != c:
        return False
    t, l, b, rr = pads
    oh, ow = h + t + b - r + 1, w + l + rr - r + 1
    # the filters' transform reads and writes (a*a/r*r)x their size on every call: it
    # pays when the batch has at least half as many tiles as the filters have channels
    # (ResNet-18, batch 32, 3x3, one forward: 512 channels on 4x4, 32 tiles, 2.1x slower
    # than the columns; 256 on 8x8, 128 tiles, 0.72x; 16-128 channels 0.54-0.70x)
    return min(oh, ow) >= TILE and 2 * n * -(-oh // TILE) * -(-ow // TILE) >= max(c, W.shape[0])


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
    eval-only steps of :class:`~singa.kernels.conv_epilogue.Epilogue` (see
    :func:`singa.kernels.conv_forward.forward`), a batch slice at a time on the
    workers. Returns (N, O, OH, OW), NCHW with NHWC memory, like the column product."""
    r = conv.kernel_size[0]
    steps = dict(relu=relu, residual=residual, pool=pool, affine=affine)
    return forward_padded(x, U, r, conv.pads, b, **steps)


def forward_padded(x: Any, U: Any, r: int, pads: tuple, b: Any = None, **steps: Any) -> Any:
    """:func:`forward` for a stride-1 r x r convolution padded by ``pads`` (top, left,
    bottom, right) given as plain arguments; ``steps`` are the Epilogue's."""
    n, c, h, w = x.shape
    o = U.shape[2]
    oh, ow = h + pads[0] + pads[2] - r + 1, w + pads[1] + pads[3] - r + 1
    th, tw = -(-oh // TILE), -(-ow // TILE)
    a = TILE + r - 1
    y2 = scratch(np, (n * oh * ow, o), x.dtype)
    epi = Epilogue(np, (n, oh, ow, o), x.dtype, bias=b, **steps)
    xh = x.transpose(0, 2, 3, 1)
    top, left = pads[:2]

    def piece(i0: int, i1: int) -> None:
        tiles = (i1 - i0) * th * tw
        v = input_tiles(xh[i0:i1], r, top, left, th, tw)
        prod = scratch(np, (a * a, tiles, o), x.dtype)
        np.matmul(v, U, out=prod)
        out = y2[i0 * oh * ow : i1 * oh * ow]
        if r == 3:
            conv_winograd_tiles.output_tiles(prod, th, tw, out.reshape(i1 - i0, oh, ow, o))
        else:
            _tiles_out(prod.reshape(a * a, -1), th, tw, out.reshape(i1 - i0, oh, ow, o))
        epi(out, i0, i1)

    per_sample = a * a * th * tw * (c + o) * x.itemsize
    workers.run_pieces(piece, batch_slices(n, th * tw, per_sample, _SLICE_BYTES))
    return epi.output(y2)


def batch_slices(n: int, tiles_per_sample: int, bytes_per_sample: int, budget: int) -> list[tuple[int, int]]:
    """``range(n)`` cut into even slices of about ``budget`` bytes (a sample's tiles in
    every form take ``bytes_per_sample``), but not so many that a slice has fewer than
    :data:`MIN_SLICE_TILES` tiles while two slices could have that many; an even
    number of slices when there are several, so that two workers finish together.
    The slices depend on the shapes only, never on the worker count."""
    count = -(-n * bytes_per_sample // budget)
    count = min(count, max(2, n * tiles_per_sample // MIN_SLICE_TILES))
    return workers.even_pieces(n, count + (count > 1 and count % 2))


def phase_columns(xh: Any, top: int, left: int, rows: int, q: int) -> Any:
    """``xh`` (N, H, W, C) zero-padded by ``top`` and ``left`` (and below and right to
    ``rows`` x ``q*4``), laid out in TILE phases: a pooled array (N, rows, 4, q, C) with
    padded column ``k*4 + s`` at ``[:, :, s, k]`` (what the transforms read)."""
    out = scratch(np, (xh.shape[0], rows, TILE, q, xh.shape[3]), xh.dtype)
    _phase(np.ascontiguousarray(xh), TILE, top, left, out)
    return out


def input_tiles(xh: Any, r: int, top: int, left: int, th: int, tw: int) -> Any:
    """The transformed input tiles ``V = B^T d B`` (a*a, N*th*tw, C), a pooled array, of
    ``xh`` (N, H, W, C) zero-padded by ``top`` and ``left`` (and below and right as far as
    the th x tw tiles of F(4x4, r x r) reach)."""
    if r == 3:  # long passes over the slice (conv_winograd_tiles says what that saves)
        return conv_winograd_tiles.input_tiles(xh, top, left, th, tw)
    n, c = xh.shape[0], xh.shape[3]
    a = TILE + r - 1
    rows, q = th * TILE + a - TILE, tw + -(-(a - TILE) // TILE)  # the input rows and phases the tiles read
    phased = phase_columns(xh, top, left, rows, q)
    v = scratch(np, (a * a, n * th * tw, c), xh.dtype)
    _tiles_in(phased, th, tw, v.reshape(a * a, -1))
    return v


# The transforms loop over long contiguous runs, a row of tiles at a time: numba's
# vector loops need about 32 iterations, so a loop over 16 channels would run scalar.
# The input's columns are first laid out in TILE phases (padded column k*TILE + s at
# [s, k]), so that column j of every tile of the row is one run ([j % TILE, j // TILE:]).
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


@helper
def _scatter(z, y, n, ty):  # pragma: no cover (compiled)
    """Output pixel (ty*m + i, tx*m + j) of sample n of ``y`` from z[i, j, tx] (m, m, tiles
    of the row, O), for the pixels inside ``y``."""
    m, tw = z.shape[0], z.shape[2]
    for i in range(min(m, y.shape[1] - ty * m)):
        for tx in range(tw):
            for j in range(min(m, y.shape[2] - tx * m)):
                for ch in range(y.shape[3]):
                    y[n, ty * m + i, tx * m + j, ch] = z[i, j, tx, ch]


# The transforms written out: one pass over a row of tiles makes all rows of B^T d (or
# of A^T M) from all the sources, sharing subexpressions (the rows of a pair of points
# +-p are E + O and E - O), instead of a pass per nonzero of the matrix, which took
# about twice as long. float32 constants keep the arithmetic in float32 (numba widens
# an int times a float32 to float64). a = 6 for 3x3 filters, 8 for 5x5; the input
# transform of 3x3 filters is conv_winograd_tiles's (long passes over a slice).
@kernel
def _tiles_in(phased, th, tw, v):  # pragma: no cover (compiled)
    """v[k1*8 + k2, tiles, :] = (B^T d B)[k1, k2] for each 8x8 tile d (5x5 filters) of
    the input phased by :func:`_phase` (n, rows, 4, q, C), a row of tiles at a time."""
    a = 8
    q, c = phased.shape[3], phased.shape[4]
    size, run = 4 * q * c, tw * c
    flat = phased.reshape(phased.size)
    e = np.empty((a, size), phased.dtype)
    ef = e.reshape(a * size)
    for n in range(phased.shape[0]):
        for ty in range(th):
            # along the rows: source j is the tile row's padded row j
            _bt8(flat, (n * phased.shape[1] + ty * 4) * size, size, 4 * size, size, e, 0, 0)
            t0 = (n * th + ty) * run
            for k1 in range(a):  # along the columns: column j of every tile of the row
                _bt8(ef, k1 * size, q * c, c, run, v, k1 * a, t0)


@kernel
def _tiles_out(prod, th, tw, y):  # pragma: no cover (compiled)
    """y (n, OH, OW, O) = (A^T M A) for each 8x8 tile's products M (5x5 filters) in
    ``prod`` (64 rows, tiles*O), cropped where the tiles overhang, a row of tiles at a
    time (3x3 filters: conv_winograd_tiles.output_tiles)."""
    a = 8
    o, width = y.shape[3], prod.shape[1]
    run = tw * o
    flat = prod.reshape(prod.size)
    f = np.empty((a * 4, run), prod.dtype)
    z = np.empty((4, 4 * run), prod.dtype)
    for n in range(y.shape[0]):
        for ty in range(th):
            t0 = (n * th + ty) * run
            for k1 in range(a):  # along the columns: f[k1*4 + i] from prod[k1*a + k2]
                _at8(flat, k1 * a * width + t0, width, run, f, k1 * 4, 0)
            _at8(f.reshape(a * 4 * run), 0, 4 * run, 4 * run, z, 0, 0)  # along the rows
            _scatter(z.reshape(4, 4, tw, o), y, n, ty)


@helper
def _bt8(src, base, step, shift, size, out, row, start):  # pragma: no cover (compiled)
    """out[row + k, start:start + size] = B^T[k] . (the 8 sources) of F(4x4, 5x5), k < 8,
    source j being ``src[base + (j % 4) * step + (j // 4) * shift:][:size]``."""
    s0, s1, s2, s3 = base, base + step, base + 2 * step, base + 3 * step
    e, t = start + size, base + shift
    _rows_bt8(
        src[s0 : s0 + size], src[s1 : s1 + size], src[s2 : s2 + size], src[s3 : s3 + size],
        src[t : t + size], src[t + step : t + step + size], src[t + 2 * step : t + 2 * step + size],
        src[t + 3 * step : t + 3 * step + size],
        out[row, start:e], out[row + 1, start:e], out[row + 2, start:e], out[row + 3, start:e],
        out[row + 4, start:e], out[row + 5, start:e], out[row + 6, start:e], out[row + 7, start:e],
    )  # fmt: skip


@helper
def _at8(src, base, step, size, out, row, start):  # pragma: no cover (compiled)
    """out[row + i, start:start + size] = A^T[i] . (the 8 sources) of F(4x4, 5x5), i < 4,
    source j being ``src[base + j * step:][:size]``."""
    e = start + size
    _rows_at8(
        src[base : base + size], src[base + step : base + step + size],
        src[base + 2 * step : base + 2 * step + size], src[base + 3 * step : base + 3 * step + size],
        src[base + 4 * step : base + 4 * step + size], src[base + 5 * step : base + 5 * step + size],
        src[base + 6 * step : base + 6 * step + size], src[base + 7 * step : base + 7 * step + size],
        out[row, start:e], out[row + 1, start:e], out[row + 2, start:e], out[row + 3, start:e],
    )  # fmt: skip


@helper
def _rows_bt8(d0, d1, d2, d3, d4, d5, d6, d7, o0, o1, o2, o3, o4, o5, o6, o7):  # pragma: no cover (compiled)
    """o_k = B^T[k] . (d0, ..., d7), elementwise, for F(4x4, 5x5)'s B^T (:func:`matrices`,
    points 0, +-1, +-2, +-1/2): rows 0 and 7 alone, the others in pairs E + O, E - O."""
    g, h, f025, f05 = np.float32(5.25), np.float32(4.25), np.float32(0.25), np.float32(0.5)
    f125, f2, f25, f4, f5 = np.float32(1.25), np.float32(2), np.float32(2.5), np.float32(4), np.float32(5)
    for u in range(o0.size):
        e1 = d2[u] + d6[u] - h * d4[u]
        q1 = d1[u] + d5[u] - h * d3[u]
        e2 = f025 * d2[u] - f125 * d4[u] + d6[u]
        q2 = f05 * d1[u] - f25 * d3[u] + f2 * d5[u]
        e3 = f4 * d2[u] - f5 * d4[u] + d6[u]
        q3 = f2 * d1[u] - f25 * d3[u] + f05 * d5[u]
        o0[u] = d6[u] - d0[u] + g * (d2[u] - d4[u])
        o1[u] = e1 + q1
        o2[u] = e1 - q1
        o3[u] = e2 + q2
        o4[u] = e2 - q2
        o5[u] = e3 + q3
        o6[u] = e3 - q3
        o7[u] = d7[u] - d1[u] + g * (d3[u] - d5[u])


@helper
def _rows_at8(s0, s1, s2, s3, s4, s5, s6, s7, o0, o1, o2, o3):  # pragma: no cover (compiled)
    """o_i = A^T[i] . (s0, ..., s7), elementwise, for F(4x4, 5x5)'s A^T rows
    (1, 1, 1, 1, 1, 1, 1, 0), (0, 1, -1, 2, -2, 1/2, -1/2, 0), (0, 1, 1, 4, 4, 1/4, 1/4, 0),
    (0, 1, -1, 8, -8, 1/8, -1/8, 1)."""
    f2, f4, f8 = np.float32(2), np.float32(4), np.float32(8)
    f05, f025, f0125 = np.float32(0.5), np.float32(0.25), np.float32(0.125)
    for u in range(o0.size):
        a1 = s1[u] + s2[u]
        b1 = s1[u] - s2[u]
        a2 = s3[u] + s4[u]
        b2 = s3[u] - s4[u]
        a3 = s5[u] + s6[u]
        b3 = s5[u] - s6[u]
        o0[u] = s0[u] + a1 + a2 + a3
        o1[u] = b1 + f2 * b2 + f05 * b3
        o2[u] = a1 + f4 * a2 + f025 * a3
        o3[u] = b1 + f8 * b2 + f0125 * b3 + s7[u]
