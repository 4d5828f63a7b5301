"""Depthwise convolution: the kernels of :class:`~singa.autograd.conv.Conv2d` when
every channel has its own single filter (``groups == C == O``, filters (C, 1, kh, kw)),
as in separable convolutions (Xception, MobileNet).

The grouped path of ``Conv2d`` makes kh*kw columns per pixel and multiplies one tiny
(1 x kh*kw) @ (kh*kw x 1) product per channel. Here, on numpy float32/float64 arrays,
three numba kernels (:mod:`singa.kernels.jit`) walk the NHWC pixels once each, the
channel axis innermost: forward ``y[p] = sum_k window_k(x)[p] * W[:, k]``, the weight
gradient ``dW[:, k] = sum_p dy[p] * window_k(x)[p]`` and the input gradient
``dxpad[window_k] += dy * W[:, k]`` (float16 arrays are computed in float32, as
numba has no float16). For cupy the same sums are kh*kw
elementwise passes, one per kernel offset k (a strided view of the padded input times
one weight per channel, broadcast along the contiguous channel axis; with stride 1 a
window's row is one contiguous run of OW*C values).

Both kinds run over pieces of the batch (and of the output rows when one sample is
large) of about ``_PIECE_BYTES``, so the arrays of a piece stay in the CPU's cache
between offsets; pieces run on :func:`~singa.kernels.workers.run_pieces`' threads.
Pieces depend only on the shapes, offsets are added in a fixed order and partial
weight gradients are summed in piece order, so results are the same bits with any
number of threads, eager or graph. Outputs and input gradients are NCHW views of NHWC
memory, as the other convolution paths make them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import singa.kernels.conv_geometry as cgeo
import singa.kernels.im2col as im
from singa.device import array_module
from singa.kernels.buffers import scratch
from singa.kernels.jit import FLOAT_DTYPES, kernel
from singa.kernels.workers import run_pieces

__all__ = ["applies", "forward", "backward"]

# output bytes per piece: a piece's output, its temporary and the input rows it reads
# stay in a core's L2 cache across the kh*kw passes
_PIECE_BYTES = 1 << 18


def applies(groups: int, x_shape: tuple, w_shape: tuple) -> bool:
    """Whether a convolution of ``groups`` groups on input ``x_shape`` with filters
    ``w_shape`` is a depthwise convolution (one filter per channel, at least two
    channels)."""
    c = x_shape[1]
    return groups > 1 and groups == c == w_shape[0] and w_shape[1] == 1


def _pieces(n: int, rows: int, row_bytes: int) -> list[tuple[int, int, int, int]]:
    """(i0, i1, r0, r1) pieces of an output of ``n`` samples of ``rows`` rows of
    ``row_bytes`` each: several whole samples per piece, or row ranges of one sample
    when a sample alone is larger than ``_PIECE_BYTES``."""
    per_piece = max(1, _PIECE_BYTES // row_bytes)
    if per_piece >= rows:
        step = per_piece // rows
        return [(i, min(i + step, n), 0, rows) for i in range(0, n, step)]
    return [(i, i + 1, r, min(r + per_piece, rows)) for i in range(n) for r in range(0, rows, per_piece)]


def _padded_nhwc(xp: Any, x: Any, pads: tuple) -> Any:
    """``x`` (N, C, H, W) as an (N, H+t+b, W+l+r, C) array with NHWC-contiguous memory
    and a zero border: a view when ``x`` already is so and needs no padding."""
    t, l, b, r = pads
    xh = x.transpose(0, 2, 3, 1)
    if t == l == b == r == 0 and xh.flags.c_contiguous:
        return xh
    n, h, w, c = xh.shape
    return im.pad_nhwc_into(scratch(xp, (n, h + t + b, w + l + r, c), x.dtype), xh, pads)


def _geometry(kernel_size: tuple, stride: tuple, dilation: tuple, pads: tuple, x_shape: tuple) -> tuple:
    """(kh, kw, sh, sw, dh, dw, oh, ow) of a convolution on an input of ``x_shape``."""
    (kh, kw), (sh, sw), (dh, dw), (t, l, b, r) = kernel_size, stride, dilation, pads
    h, w = x_shape[2:]
    return kh, kw, sh, sw, dh, dw, cgeo.out_size(h, kh, sh, t, b, dh), cgeo.out_size(w, kw, sw, l, r, dw)


def _offsets(geo: tuple, c: int) -> list[tuple[int, slice, slice]]:
    """(k, row slice, column slice) of each kernel offset k = a*kw + b: the input cells
    that offset (a, b) meets for output rows/columns starting at 0. With stride 1 along
    the width the columns are those of :func:`_flat` arrays (a run of OW*C values)."""
    kh, kw, sh, sw, dh, dw, oh, ow = geo
    out = []
    for a in range(kh):
        for b in range(kw):
            rs = slice(a * dh, a * dh + sh * (oh - 1) + 1, sh)
            if sw == 1:
                cs = slice(b * dw * c, (b * dw + ow) * c)
            else:
                cs = slice(b * dw, b * dw + sw * (ow - 1) + 1, sw)
            out.append((a * kw + b, rs, cs))
    return out


def _flat(a: Any, geo: tuple) -> Any:
    """An (N, rows, width, C) array with contiguous rows as (N, rows, width*C) when the
    stride along the width is 1 (a window's row is then one contiguous run, and numpy's
    loops run over OW*C values instead of C); else ``a`` itself."""
    return a.reshape(a.shape[0], a.shape[1], -1) if geo[3] == 1 else a


def _weights(xp: Any, wk: Any, geo: tuple) -> Any:
    """The (kh*kw, C) weights, repeated OW times along a row for :func:`_flat` arrays."""
    return xp.tile(wk, (1, geo[7])) if geo[3] == 1 else wk


def _rows(s: slice, r0: int, r1: int, step: int) -> slice:
    """The part of the offset's row slice ``s`` for output rows r0:r1."""
    return slice(s.start + r0 * step, s.start + (r1 - 1) * step + 1, step)


def forward(
    x: Any,
    W: Any,
    b: Any,
    kernel_size: tuple,
    stride: tuple,
    pads: tuple,
    dilation: tuple,
    keep: tuple[bool, bool] | None = None,
) -> tuple[Any, Any]:
    """(y, saved): y = depthwise conv(x, W) + b (see :func:`applies`) with this
    geometry, and, when ``keep`` (keep what dx needs, keep what dW needs) is given,
    what :func:`backward` reads from the operator's cache (else None)."""
    xp = array_module(x)
    if xp is np and x.dtype == np.float16:  # numba has no float16: compute in float32
        b32 = None if b is None else b.astype(np.float32)
        x32, w32 = x.astype(np.float32), W.astype(np.float32)
        y, saved = forward(x32, w32, b32, kernel_size, stride, pads, dilation, keep)
        return y.astype(np.float16), saved
    n, c = x.shape[:2]
    geo = _geometry(kernel_size, stride, dilation, pads, x.shape)
    kh, kw, sh, _, _, _, oh, ow = geo
    xh = _padded_nhwc(xp, x, pads)
    wk = xp.ascontiguousarray(W.reshape(c, kh * kw).T)  # (kh*kw, C)
    y = scratch(xp, (n, oh, ow, c), x.dtype)
    xf, yf, wf = _flat(xh, geo), _flat(y, geo), _weights(xp, wk, geo)
    offsets = _offsets(geo, c)

    jit = _compiled(xp, x.dtype)

    def piece(i0: int, i1: int, r0: int, r1: int) -> None:
        if jit:
            _forward_kernel(xh[i0:i1], wk, y[i0:i1, r0:r1], r0, kw, sh, *geo[3:6])
            if b is not None:
                y[i0:i1, r0:r1] += b.astype(y.dtype, copy=False)
            return
        ys = yf[i0:i1, r0:r1]
        tmp = scratch(xp, ys.shape, ys.dtype)
        for k, rs, cs in offsets:
            win = xf[i0:i1, _rows(rs, r0, r1, sh), cs]
            if k == 0:
                xp.multiply(win, wf[k], out=ys)
            else:
                xp.multiply(win, wf[k], out=tmp)
                ys += tmp
        if b is not None:
            y[i0:i1, r0:r1] += b.astype(ys.dtype, copy=False)

    run_pieces(piece, _pieces(n, oh, ow * c * x.itemsize), xp)
    saved = None
    if keep is not None:
        saved = ("depthwise", x.shape, xh if keep[1] else None, wk if keep[0] else None)
    return y.transpose(0, 3, 1, 2), saved


def is_cached(op: Any) -> bool:
    """Whether ``op``'s cache is what :func:`forward` saved."""
    return isinstance(op.cache, tuple) and len(op.cache) == 4 and op.cache[0] == "depthwise"


def _weight_grad(xp: Any, dyh: Any, xh: Any, geo: tuple, w_shape: tuple) -> Any:
    """dW (C, 1, kh, kw): per offset, the sum of dy times that offset's input window,
    summed per piece and then over pieces in piece order."""
    kh, kw, sh, _, _, _, oh, ow = geo
    n, c = dyh.shape[0], dyh.shape[3]
    offsets = _offsets(geo, c)
    dyf, xf = _flat(dyh, geo), _flat(xh, geo)

    jit = _compiled(xp, dyh.dtype)

    def piece(i0: int, i1: int, r0: int, r1: int) -> Any:
        part = xp.empty((kh * kw, c), dyh.dtype)
        if jit:
            _weight_grad_kernel(dyh[i0:i1, r0:r1], xh[i0:i1], part, r0, kw, sh, *geo[3:6])
            return part
        ds = dyf[i0:i1, r0:r1]
        tmp = scratch(xp, ds.shape, ds.dtype)
        for k, rs, cs in offsets:
            xp.multiply(ds, xf[i0:i1, _rows(rs, r0, r1, sh), cs], out=tmp)
            # summed over whole rows (long loops), then over the OW positions in a row
            tmp.reshape(-1, ow * c).sum(axis=0).reshape(ow, c).sum(axis=0, out=part[k])
        return part

    parts = run_pieces(piece, _pieces(n, oh, ow * c * dyh.itemsize), xp)
    total = parts[0]
    for p in parts[1:]:
        total += p
    return xp.ascontiguousarray(total.T).reshape(w_shape)


def _input_grad(xp: Any, dyh: Any, wk: Any, geo: tuple, x_shape: tuple, pads: tuple) -> Any:
    """dx (N, C, H, W) with NHWC memory: each offset's dy * weight added into the
    padded gradient, a few whole samples per piece (windows of neighbouring rows
    overlap, so pieces never split a sample)."""
    kh, kw, sh, sw, dh, dw, oh, ow = geo
    n, c, h, w = x_shape
    t, l, b, r = pads
    dxh = scratch(xp, (n, h + t + b, w + l + r, c), dyh.dtype)
    offsets = _offsets(geo, c)
    dyf, dxf, wf = _flat(dyh, geo), _flat(dxh, geo), _weights(xp, wk, geo)

    jit = _compiled(xp, dyh.dtype)

    def piece(i0: int, i1: int, _r0: int, _r1: int) -> None:
        if jit:
            _input_grad_kernel(dyh[i0:i1], wk, dxh[i0:i1], kw, *geo[2:6])
            return
        ds = dyf[i0:i1]
        dxs = dxf[i0:i1]
        dxs[...] = 0
        tmp = scratch(xp, ds.shape, ds.dtype)
        for k, rs, cs in offsets:
            xp.multiply(ds, wf[k], out=tmp)
            dxs[:, rs, cs] += tmp

    run_pieces(piece, _pieces(n, 1, oh * ow * c * dyh.itemsize), xp)
    return dxh[:, t : t + h, l : l + w].transpose(0, 3, 1, 2)


def backward(op: Any, dy: Any) -> tuple:
    """(dx, dW[, db]) of a Conv2d ``op`` whose forward ran :func:`forward`."""
    _, x_shape, xh, wk = op.cache
    xp = array_module(dy)
    if xp is np and dy.dtype == np.float16:  # forward computed in float32
        grads = backward(op, dy.astype(np.float32))
        return tuple(None if g is None else g.astype(np.float16) for g in grads)
    c = x_shape[1]
    geo = _geometry(op.kernel_size, op.stride, op.dilation, op.pads, x_shape)
    kh, kw = geo[:2]
    dyh = xp.ascontiguousarray(dy.transpose(0, 2, 3, 1))  # a view when dy is NHWC in memory
    dx = None if wk is None else _input_grad(xp, dyh, wk, geo, x_shape, op.pads)
    dW = None if xh is None else _weight_grad(xp, dyh, xh, geo, (c, 1, kh, kw))
    if not op.bias:
        return dx, dW
    db = dyh.reshape(-1, c).sum(axis=0) if op.needs_grad[2] else None
    return dx, dW, db


# ----- compiled kernels (numpy float32/float64): one pass over memory per piece ----------
def _compiled(xp: Any, dtype: Any) -> bool:
    """Whether the numba kernels run (numpy arrays of float32 or float64; the elementwise
    passes above serve cupy)."""
    return xp is np and dtype in FLOAT_DTYPES


@kernel
def _forward_kernel(xh, wk, y, r0, kw, sh, sw, dh, dw):  # pragma: no cover (compiled)
    # y (n, rows, OW, C) = output rows r0.. of the samples of xh (n, Hp, Wp, C); wk (kh*kw, C)
    n, rows, ow, c = y.shape
    for s in range(n):
        for i in range(rows):
            for j in range(ow):
                out = y[s, i, j]
                out[:] = 0
                for k in range(wk.shape[0]):
                    xr = xh[s, (r0 + i) * sh + (k // kw) * dh, j * sw + (k % kw) * dw]
                    wr = wk[k]
                    for ch in range(c):
                        out[ch] += xr[ch] * wr[ch]


@kernel
def _weight_grad_kernel(dy, xh, part, r0, kw, sh, sw, dh, dw):  # pragma: no cover (compiled)
    # part (kh*kw, C) = sum over dy's pixels of dy times each offset's input
    n, rows, ow, c = dy.shape
    part[:] = 0
    for s in range(n):
        for i in range(rows):
            for j in range(ow):
                g = dy[s, i, j]
                for k in range(part.shape[0]):
                    xr = xh[s, (r0 + i) * sh + (k // kw) * dh, j * sw + (k % kw) * dw]
                    acc = part[k]
                    for ch in range(c):
                        acc[ch] += g[ch] * xr[ch]


@kernel
def _input_grad_kernel(dy, wk, dxh, kw, sh, sw, dh, dw):  # pragma: no cover (compiled)
    # dxh (n, Hp, Wp, C), zeroed here, += dy times each offset's weights at its windows
    n, oh, ow, c = dy.shape
    dxh[:] = 0
    for s in range(n):
        for i in range(oh):
            for j in range(ow):
                g = dy[s, i, j]
                for k in range(wk.shape[0]):
                    dr = dxh[s, i * sh + (k // kw) * dh, j * sw + (k % kw) * dw]
                    wr = wk[k]
                    for ch in range(c):
                        dr[ch] += g[ch] * wr[ch]
