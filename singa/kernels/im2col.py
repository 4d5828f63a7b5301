"""Private helpers of the convolution and pooling operators (their geometry is the
public :mod:`singa.kernels.conv_geometry`, their buffer pool :mod:`singa.kernels.buffers`).

- memory-layout helpers: the operators accept NCHW arrays with any strides and
  produce NCHW arrays whose memory is laid out NHWC ("channels last"): a
  (N, C, H, W) array with strides (H*W*C, 1, W*C, C). The public API stays NCHW;
  the layout only makes the column matrices, col2im and pooling faster (see
  ``bench/README.md``, "Design measurements");
- im2col / col2im with strided views (``as_strided`` + one copy), written against
  the array module ``xp`` so the same code runs on numpy and cupy; on the CPU the
  per-offset col2im, the steps after a convolution's product (:func:`finish_rows`),
  max-pooling's windows (:func:`max_of_windows`) and a padded buffer's border are
  compiled passes (numba, :mod:`singa.kernels.jit`) with the same results;
- :func:`split_batch`, which runs a batch-sliceable numpy loop on several threads
  (numpy releases the GIL inside its elementwise loops; copies, col2im and pooling
  are otherwise single-threaded while BLAS uses every core).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from singa.kernels import workers
from singa.kernels.buffers import scratch
from singa.kernels.jit import kernel, takes_floats


def is_channels_last(x: Any) -> bool:
    """True when a 4-D array's memory is NHWC (its channel axis is the innermost)."""
    s = x.strides
    return x.shape[1] > 1 and s[1] == x.itemsize and s[3] == x.shape[1] * x.itemsize


def alloc_nhwc(xp: Any, shape: tuple, dtype: Any, fill: float | None = None) -> Any:
    """A new (N, C, H, W) array with NHWC memory, zero/``fill``-initialised or empty."""
    n, c, h, w = shape
    if fill is None:
        a = xp.empty((n, h, w, c), dtype=dtype)
    elif fill == 0:
        a = xp.zeros((n, h, w, c), dtype=dtype)
    else:
        a = xp.full((n, h, w, c), fill, dtype=dtype)
    return a.transpose(0, 3, 1, 2)


def alloc_like(x: Any, shape: tuple, xp: Any, fill: float | None = None) -> Any:
    """A new 4-D array of ``shape`` with ``x``'s memory layout (NHWC or NCHW)."""
    if is_channels_last(x):
        return alloc_nhwc(xp, shape, x.dtype, fill)
    if fill is None:
        return xp.empty(shape, dtype=x.dtype)
    if fill == 0:
        return xp.zeros(shape, dtype=x.dtype)
    return xp.full(shape, fill, dtype=x.dtype)


def pooled_like(x: Any, shape: tuple, xp: Any, dtype: Any = None, nhwc: bool | None = None) -> Any:
    """An uninitialised pooled 4-D array (see :func:`scratch`) of ``shape`` in
    ``x``'s memory layout (or NHWC when ``nhwc`` says so)."""
    dtype = x.dtype if dtype is None else dtype
    if nhwc is None:
        nhwc = is_channels_last(x)
    if nhwc:
        n, c, h, w = shape
        return scratch(xp, (n, h, w, c), dtype).transpose(0, 3, 1, 2)
    return scratch(xp, shape, dtype)


def pad_nchw(
    x: Any, pads: tuple, xp: Any, fill: float = 0.0, extra: tuple = (0, 0), pooled: bool = False
) -> Any:
    """``x`` (N, C, H, W) padded by ``pads`` (plus ``extra`` cells at the bottom and
    right) with ``fill``, in ``x``'s memory layout. Returns ``x`` itself when nothing
    is added. ``pooled``: the result comes from the buffer pool (see :func:`scratch`)."""
    t, l, b, r = pads
    b += extra[0]
    r += extra[1]
    if t == l == b == r == 0:
        return x
    n, c, h, w = x.shape
    shape = (n, c, h + t + b, w + l + r)
    out = pooled_like(x, shape, xp) if pooled else alloc_like(x, shape, xp)
    if t:
        out[:, :, :t] = fill
    if b:
        out[:, :, h + t :] = fill
    if l:
        out[:, :, t : h + t, :l] = fill
    if r:
        out[:, :, t : h + t, w + l :] = fill
    out[:, :, t : t + h, l : l + w] = x
    return out


def strided_view(xp: Any, x: Any, shape: tuple, strides: tuple) -> Any:
    """A view of ``x``'s memory with ``shape`` and byte ``strides`` (from its first
    element). For a C-contiguous numpy ``x`` it is made by the ndarray constructor,
    which also checks that the view stays inside ``x``: 0.6 us against 6 us for
    ``as_strided``, whose cost showed in every batch-1 convolution."""
    if xp is np and x.flags.c_contiguous and x.size:
        return np.ndarray(shape, x.dtype, x, 0, strides)
    return xp.lib.stride_tricks.as_strided(x, shape, strides)


def windows(
    xp: Any, x: Any, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, oh: int, ow: int, groups: int = 1
) -> Any:
    """Strided view (N, OH, OW, G, kh, kw, C/G) of the windows of ``x`` given as
    (N, H, W, C) with any strides (no copy; do not write to it)."""
    s0, s1, s2, s3 = x.strides
    cg = x.shape[3] // groups
    return strided_view(
        xp, x, (x.shape[0], oh, ow, groups, kh, kw, cg), (s0, s1 * sh, s2 * sw, s3 * cg, s1 * dh, s2 * dw, s3)
    )


def windows_kmajor(
    xp: Any, x: Any, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, oh: int, ow: int
) -> Any:
    """Read-only strided view (C, kh, kw, N, OH, OW) of the windows of ``x`` given
    as (N, C, H, W) with any strides (no copy)."""
    s0, s1, s2, s3 = x.strides
    return strided_view(
        xp, x, (x.shape[1], kh, kw, x.shape[0], oh, ow), (s1, s2 * dh, s3 * dw, s0, s2 * sh, s3 * sw)
    )


def col2im_nhwc(
    dcols: Any, dx: Any, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, oh: int, ow: int
) -> None:
    """Add the columns ``dcols`` (N, OH, OW, G, kh, kw, C/G) back into ``dx``
    (N, Hp, Wp, G, C/G)."""
    for i in range(kh):
        hs = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
        for j in range(kw):
            ws = slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)
            dx[:, hs, ws] += dcols[:, :, :, :, i, j]


def col2im_offsets(
    dcols: Any, dx: Any, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, oh: int, ow: int
) -> None:
    """Add the columns ``dcols`` (kh, kw, N, OH, OW, C) back into ``dx`` (N, Hp, Wp, C).
    On the CPU (float32/float64) one compiled pass (:func:`_col2im_offsets`), else one
    array addition per kernel offset; both add the offsets in the same order."""
    if takes_floats(dx, dcols):
        _col2im_offsets(dcols, dx, sh, sw, dh, dw)
        return
    for i in range(kh):
        hs = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
        for j in range(kw):
            ws = slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)
            dx[:, hs, ws] += dcols[i, j]


def max_of_windows(xp: Any, src: Any, kh: int, kw: int, sh: int, sw: int, out: Any) -> None:
    """``out`` (N, PH, PW, C) = the maximum of each (kh, kw) window, strides (sh, sw),
    of ``src`` (N, H, W, C; any strides), over the window's offsets in row-major order
    with ``maximum`` (NaN wins): the one definition of max-pool's forward values, for
    :class:`~singa.autograd.pooling.MaxPool2d` and a convolution's fused evaluation
    epilogue alike. One compiled pass (:func:`_max_windows`) when the channels are
    contiguous (NHWC memory), else kh*kw ``maximum`` calls over strided views."""
    ph, pw = out.shape[1:3]
    if xp is np and takes_floats(src, out) and src.strides[3] == out.strides[3] == src.itemsize:
        _max_windows(src, kh, kw, sh, sw, out)
        return
    views = [
        src[:, i : i + sh * (ph - 1) + 1 : sh, j : j + sw * (pw - 1) + 1 : sw]
        for i in range(kh)
        for j in range(kw)
    ]
    if len(views) == 1:
        out[...] = views[0]
        return
    xp.maximum(views[0], views[1], out=out)
    for v in views[2:]:
        xp.maximum(out, v, out=out)


# kh*kw maximum calls over strided views walk the output kh*kw times, 32-64 contiguous
# channels at a time; one pass over the windows with the channels innermost is 1.7-2x
# faster (2x2 windows, stride 2: a (32, 24, 24, 32) float32 slice 243 -> 142 us, batch 1
# 11.9 -> 5.9 us) and gives the same bits: the same order, and numpy's rule (NaN wins;
# of two equal zeros, the second), which numba's maximum gives with its operands swapped.
@kernel
def _max_windows(src, kh, kw, sh, sw, out):  # pragma: no cover (compiled)
    n, ph, pw, c = out.shape
    for b in range(n):
        for i in range(ph):
            for j in range(pw):
                d = out[b, i, j]
                first = src[b, i * sh, j * sw]
                for o in range(c):
                    d[o] = first[o]
                for k in range(1, kh * kw):
                    s = src[b, i * sh + k // kw, j * sw + k % kw]
                    for o in range(c):
                        d[o] = np.maximum(s[o], d[o])


def finish_rows(
    xp: Any, out: Any, bias: Any = None, affine: tuple | None = None, residual: Any = None, relu: bool = False
) -> None:
    """In place on ``out`` (rows, O), each step (when given) rounded as its own array
    operation would round it: ``+= bias`` (O,); ``(out - m) * a + b`` with ``affine`` =
    (m, a, b), each (O,) (BatchNorm's evaluation, see
    :meth:`~singa.autograd.normalization.BatchNorm2d.eval_coefficients`); ``+=
    residual`` (rows, O); then ReLU as the ReLU operator computes it (0 for -0.0, NaN
    stays). On the CPU (float32/float64) one compiled pass (:func:`_finish_rows`), else
    array expressions."""
    if bias is None and affine is None and residual is None and not relu:
        return
    if _compiled_rows(out, residual, bias, *(affine or ())):
        row = out[0]  # stands for a vector not given (never read): no allocation per slice
        if bias is None and affine is None and residual is None:
            # ReLU alone (a kernel-major convolution's bias is in its product): storing
            # back the loaded value compiled to a branch per element, 4.5x slower than
            # adding zeros first, which changes no result (-0.0 + 0 becomes 0 anyway)
            bias = _zeros(out.shape[1], out.dtype)
        m, a, b = affine if affine is not None else (row, row, row)
        res = residual if residual is not None else out
        flags = (bias is not None, affine is not None, residual is not None, relu)
        _finish_rows(out, row if bias is None else bias, m, a, b, res, *flags)
    else:
        _finish_rows_by_arrays(xp, out, bias, affine, residual, relu)


def _finish_rows_by_arrays(xp: Any, out: Any, bias: Any, affine: Any, residual: Any, relu: bool) -> None:
    """:func:`finish_rows` as array expressions (a GPU, float16, other layouts)."""
    if bias is not None:
        out += bias
    if affine is not None:
        m, a, b = affine
        out -= m
        out *= a
        out += b
    if residual is not None:
        out += residual
    if relu:
        xp.maximum(out, 0, out=out)


@functools.lru_cache(maxsize=16)
def _zeros(n: int, dtype: Any) -> np.ndarray:
    """A vector of ``n`` zeros of ``dtype``, made once per length and dtype (shared:
    only ever read)."""
    return np.zeros(n, dtype)


def _compiled_rows(out: Any, residual: Any, *vectors: Any) -> bool:
    """Whether :func:`_finish_rows` takes ``out``, ``residual`` and the per-column
    ``vectors`` (numpy floats of one dtype; matrices C-ordered, of one shape)."""
    arrays = [v for v in (residual, *vectors) if v is not None]
    if not (takes_floats(out, *arrays) and out.flags.c_contiguous and out.ndim == 2):
        return False
    return residual is None or (residual.flags.c_contiguous and residual.shape == out.shape)


# Two array passes over a batch slice's output (bias, then ReLU) cost 21 us at batch 1
# for a (1024, 16) slice, mostly dispatch; one compiled pass touches each element once.
# BatchNorm's evaluation and a ResNet block's residual are done in the same pass
# (singa.model.inference's conv+batchnorm and conv+add rules), instead of a BatchNorm, an
# Add and a ReLU pass over the whole output.
@kernel
def _finish_rows(out, bias, m, a, b, res, add_bias, affine, add_res, relu):  # pragma: no cover (compiled)
    z = out.dtype.type(0)
    for r in range(out.shape[0]):
        for o in range(out.shape[1]):
            v = out[r, o] + bias[o] if add_bias else out[r, o]
            if affine:
                v = (v - m[o]) * a[o] + b[o]
            if add_res:
                v = v + res[r, o]
            out[r, o] = (z if v <= z else v) if relu else v


# kh * kw array additions per batch slice cost 10-20 us of dispatch each; one pass over
# the columns is 3-3.6x faster (a (5, 5, 8, 8, 8, 32) float32 slice: 0.41 -> 0.13 ms)
# and gives the same bits (each dx element sums the offsets in the same order).
@kernel
def _col2im_offsets(dcols, dx, sh, sw, dh, dw):  # pragma: no cover (compiled)
    kh, kw, n, oh, ow, c = dcols.shape
    for b in range(n):
        for i in range(kh):
            for j in range(kw):
                for oy in range(oh):
                    y = oy * sh + i * dh
                    for ox in range(ow):
                        x = ox * sw + j * dw
                        for ch in range(c):
                            dx[b, y, x, ch] += dcols[i, j, b, oy, ox, ch]


def col2im_kmajor(
    dcols: Any, dx: Any, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, oh: int, ow: int
) -> None:
    """Add the columns ``dcols`` (C, kh, kw, N, OH, OW) back into ``dx`` (N, C, Hp, Wp)."""
    for i in range(kh):
        hs = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
        for j in range(kw):
            ws = slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)
            dx[:, :, hs, ws] += dcols[:, i, j].transpose(1, 0, 2, 3)


# ----- threads --------------------------------------------------------------------------
# Elementwise numpy work (im2col copies, col2im, pooling) runs on one core unless it is
# cut along the batch axis: split_batch() runs the parts on singa.kernels.workers
# (numpy releases the GIL in its loops).


def split_batch(xp: Any, fn: Callable[[int, int], None], n: int, work: int) -> None:
    """Run ``fn(start, stop)`` over ``range(n)`` cut into parts, in parallel.

    ``fn`` must only touch its own slice of the batch (outputs of different parts
    must not overlap); ``work`` is the number of elements the whole call touches.
    The parts are :func:`workers.work_pieces` of the work (inline on cupy, on one
    worker, for small work, or from a worker thread).
    """
    workers.run_pieces(fn, workers.work_pieces(n, work), xp)


def zero_border(out: Any, h: int, w: int, pads: tuple) -> None:
    """Zero the border ``pads`` (top, left, bottom, right) of ``out`` (n, H+t+b, W+l+r, C)
    around its (H, W) middle."""
    t, l, b, r = pads
    if takes_floats(out) and out.flags.c_contiguous:
        _zero_border(out, h, w, t, l)
        return
    out[:, :t] = 0
    out[:, t + h :] = 0
    out[:, t : t + h, :l] = 0
    out[:, t : t + h, l + w :] = 0


# Four slice assignments cost about 6 us of dispatch, once per convolution call: 0.1 ms
# of a batch-1 ResNet-20 inference; one compiled pass writes the same zeros.
@kernel
def _zero_border(out, h, w, t, l):  # pragma: no cover (compiled)
    z = out.dtype.type(0)
    for s in range(out.shape[0]):
        for y in range(out.shape[1]):
            middle = t <= y < t + h
            for x in range(out.shape[2]):
                if not (middle and l <= x < l + w):
                    for c in range(out.shape[3]):
                        out[s, y, x, c] = z


def pad_nhwc_into(out: Any, src: Any, pads: tuple, border: bool = True) -> Any:
    """``src`` (n, H, W, C) copied into the middle of ``out`` (n, H+t+b, W+l+r, C),
    whose border is zeroed (unless ``border`` is False: the caller zeroed it already, e.g.
    once for a buffer that takes one batch slice after another); returns ``out``."""
    t, l, b, r = pads
    h, w = src.shape[1:3]
    if border:
        zero_border(out, h, w, pads)
    out[:, t : t + h, l : l + w] = src
    return out
