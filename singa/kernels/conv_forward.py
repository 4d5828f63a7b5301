"""The forward kernels of a 2-D convolution, with or without an eval-only epilogue.

:func:`forward_saving` is the forward of :class:`singa.autograd.conv.Conv2d`: it
returns the output and what the backward needs. :func:`forward` is the same product
for evaluation, finished on each batch slice by an
:class:`~singa.kernels.conv_epilogue.Epilogue` (BatchNorm's evaluation, a residual,
ReLU, a max-pool), as :class:`singa.model.fused.ConvForward` calls it. Both take the
geometry as plain arguments: ``kernel_size`` (kh, kw), ``stride`` (sh, sw), ``pads``
(top, left, bottom, right), ``dilation`` (dh, dw) and ``groups``.

The paths (see :mod:`singa.autograd.conv` for the layouts): a depthwise convolution
runs :mod:`singa.kernels.conv_depthwise`; an ungrouped one of at most
:data:`~singa.kernels.conv_slices.KMAJOR_MAX_C` channels in NCHW memory makes
kernel-major columns (with a row of ones carrying the bias); other ungrouped ones make
pixel-major columns a batch slice at a time (:mod:`singa.kernels.conv_slices`); grouped
ones make all their columns and multiply them per group. The output is (N, O, OH, OW),
NCHW with NHWC memory.
"""

from __future__ import annotations

from typing import Any

from singa.device import array_module
from singa.kernels import conv_depthwise as depthwise
from singa.kernels import conv_geometry as cgeo
from singa.kernels import conv_slices as sl
from singa.kernels import conv_winograd as winograd
from singa.kernels import im2col as im
from singa.kernels.buffers import scratch
from singa.kernels.conv_epilogue import Epilogue

__all__ = ["forward", "forward_saving"]


def forward(
    x: Any,
    W: Any,
    b: Any = None,
    *,
    kernel_size: tuple[int, int],
    stride: tuple[int, int] = (1, 1),
    pads: tuple[int, int, int, int] = (0, 0, 0, 0),
    dilation: tuple[int, int] = (1, 1),
    groups: int = 1,
    relu: bool = False,
    residual: Any = None,
    pool: tuple | None = None,
    affine: tuple | None = None,
) -> Any:
    """y = conv2d(x, W) + b (N, O, OH, OW), NCHW with NHWC memory, then, for
    evaluation, each batch slice finished as it is made, while it is in cache:
    ``affine``, (m, a, b) per channel, y = (y - m) * a + b (BatchNorm's evaluation),
    ``residual``, an array of y's shape and dtype, added to y, ``relu``, max(y, 0)
    after it, and ``pool``, ``(kh, kw, sh, sw)`` of a max-pool without padding
    applied last (y is then the pooled output). Keeps nothing for a backward."""
    geometry = (tuple(kernel_size), tuple(stride), tuple(pads), tuple(dilation), groups)
    steps = dict(relu=relu, residual=residual, pool=pool, affine=affine)
    if depthwise.applies(groups, x.shape, W.shape):
        y, _ = depthwise.forward(x, W, b, *geometry[:4])
        fused = relu or residual is not None or pool is not None or affine is not None
        return _finish_depthwise(y, steps) if fused else y
    return _product(x, W, b, geometry, steps, None)[0]


def forward_saving(
    x: Any,
    W: Any,
    b: Any = None,
    *,
    kernel_size: tuple[int, int],
    stride: tuple[int, int] = (1, 1),
    pads: tuple[int, int, int, int] = (0, 0, 0, 0),
    dilation: tuple[int, int] = (1, 1),
    groups: int = 1,
    keep: tuple[bool, bool] | None = None,
) -> tuple[Any, Any]:
    """(y, saved): y = conv2d(x, W) + b as :func:`forward` makes it, and, when ``keep``
    is given, what the backward needs (else None): ``keep`` = (keep what dx needs,
    keep what dW needs). ``saved`` is ``("depthwise", x_shape, xh, wk)`` for a
    depthwise convolution (:func:`singa.kernels.conv_depthwise.backward`), else
    ``(x_shape, W_shape, kmajor, cols, wk)``: ``cols`` the kernel-major columns, the
    grouped columns or x itself (None unless dW is wanted) and ``wk`` the filters as
    the product used them (None unless dx is wanted)."""
    geometry = (tuple(kernel_size), tuple(stride), tuple(pads), tuple(dilation), groups)
    if depthwise.applies(groups, x.shape, W.shape):
        return depthwise.forward(x, W, b, *geometry[:4], keep=keep)
    if keep is not None and winograd.trains(x, W, *geometry):
        return _winograd(x, W, b, geometry, keep)
    return _product(x, W, b, geometry, {}, keep)


def _winograd(x: Any, W: Any, b: Any, geometry: tuple, keep: tuple) -> tuple[Any, Any]:
    """(y, saved) of a training forward as a Winograd convolution (4x fewer products'
    multiply-adds than the columns for 3x3 filters: a ResNet-20 graph step 239.6 against
    254.8 ms median, bench/README.md), saving what either backward needs, as the
    pixel-major path does (x for dW, W for dx)."""
    (r, _), _, pads, _, _ = geometry
    y = winograd.forward_padded(x, winograd.training_filters(W), r, pads, b)
    return y, (x.shape, W.shape, False, x if keep[1] else None, W if keep[0] else None)


def _finish_depthwise(y: Any, steps: dict) -> Any:
    """The epilogue ``steps`` applied to a depthwise convolution's output ``y``."""
    xp = array_module(y)
    shape = (y.shape[0], *y.shape[2:], y.shape[1])
    epi = Epilogue(xp, shape, y.dtype, **steps)
    y2 = xp.ascontiguousarray(y.transpose(0, 2, 3, 1)).reshape(-1, y.shape[1])
    epi(y2, 0, y.shape[0])
    return epi.output(y2)


def _product(x: Any, W: Any, b: Any, geometry: tuple, steps: dict, keep: tuple | None) -> tuple[Any, Any]:
    """(y, saved) of an ungrouped or grouped (not depthwise) convolution, each batch
    slice finished by an epilogue of the bias and ``steps``."""
    xp = array_module(x)
    (kh, kw), (sh, sw), pads, (dh, dw), g = geometry
    n, c, h, w = x.shape
    oh = cgeo.out_size(h, kh, sh, pads[0], pads[2], dh)
    ow = cgeo.out_size(w, kw, sw, pads[1], pads[3], dw)
    o = W.shape[0]
    m = n * oh * ow
    geo = (kh, kw, sh, sw, dh, dw, oh, ow)
    kmajor = g == 1 and c <= sl.KMAJOR_MAX_C and not im.is_channels_last(x)
    y2 = scratch(xp, (m, o), x.dtype)
    bias = None if b is None else b.astype(y2.dtype, copy=False)
    # the kernel-major product carries the bias itself
    epi = Epilogue(xp, (n, oh, ow, o), x.dtype, bias=None if kmajor else bias, **steps)
    if kmajor:
        cols, wk = _kmajor(xp, x, W, bias, y2, geo, pads, epi)
    elif g == 1:
        _sliced(xp, x, W, y2, geo, pads, epi)
        cols, wk = x, W  # backward makes the columns again from x
    else:
        cols, wk = _grouped(xp, x, W, y2, geo, pads, g)
        epi(y2, 0, n)
    saved = None
    if keep is not None:
        saved = (x.shape, W.shape, kmajor, cols if keep[1] else None, wk if keep[0] else None)
    return epi.output(y2), saved


def _grouped(xp: Any, x: Any, W: Any, y2: Any, geo: tuple, pads: tuple, g: int) -> tuple:
    """A grouped convolution into ``y2`` (N*OH*OW, O): all the columns (N, OH, OW, G,
    kh, kw, C/G) made in batch slices, then one product per group with W as (G,
    kh*kw*C/G, O/G). Returns the columns and that W, kept for backward."""
    kh, kw, *_, oh, ow = geo
    n, c = x.shape[:2]
    o = W.shape[0]
    cg, og, m = c // g, o // g, y2.shape[0]
    xpad = im.pad_nchw(x, pads, xp, pooled=True)
    cols = scratch(xp, (n, oh, ow, g, kh, kw, cg), x.dtype)
    xh = xpad.transpose(0, 2, 3, 1)

    def im2col(i0, i1):
        xp.copyto(cols[i0:i1], im.windows(xp, xh[i0:i1], *geo, g))

    im.split_batch(xp, im2col, n, cols.size)
    xpad = xh = None  # the padded input is freed before the product
    kg = kh * kw * cg
    wk = W.reshape(g, og, cg, kh, kw).transpose(0, 3, 4, 2, 1).reshape(g, kg, og)
    y3 = xp.matmul(cols.reshape(m, g, kg).transpose(1, 0, 2), wk)
    y2.reshape(m, g, og)[...] = y3.transpose(1, 0, 2)
    return cols, wk


def _sliced(xp: Any, x: Any, W: Any, y2: Any, geo: tuple, pads: tuple, epi: Epilogue) -> None:
    """Pixel-major columns (rows of kh*kw*C) made and multiplied a batch slice at a
    time into ``y2`` (N*OH*OW, O), the slices on the workers: the copy and the product
    meet in the cache, and the padding is done per slice too, so no padded copy of
    the input is made or kept. ``epi`` finishes each slice."""
    kh, kw, *_, oh, ow = geo
    n, c = x.shape[:2]
    o, rows = W.shape[0], oh * ow
    xh = x.transpose(0, 2, 3, 1)
    # (O, kh*kw*C), multiplied transposed: each filter's taps reordered within its own
    # row, where (kh*kw*C, O) moved every value across the bank (512 x 512 3x3 filters:
    # 1.5 against 2.8 ms a call; the products' speed and bits are the same)
    wk = sl.laid_out(xp, W.transpose(0, 2, 3, 1), (o, kh * kw * c))

    def piece(slices):
        for i0, i1, cb in sl.column_chunks(xp, xh, geo, pads, slices):
            out = y2[i0 * rows : i1 * rows]
            xp.matmul(cb, wk.T, out=out)
            epi(out, i0, i1)

    sl.run_slices(
        xp, piece, sl.batch_slices(xp, n, rows * kh * kw * c * x.itemsize, o), n * rows * kh * kw * c * o
    )


def _kmajor(xp: Any, x: Any, W: Any, bias: Any, y2: Any, geo: tuple, pads: tuple, epi: Epilogue) -> tuple:
    """Kernel-major columns: rows (C, kh, kw) of length M = (N, OH, OW), plus a row
    of ones that carries the bias through the product (and gives db in backward),
    copied and multiplied a batch slice at a time on the workers, each finished by
    ``epi``. Returns the columns and the filters as (O, C*kh*kw [+1]), both kept
    for backward."""
    kh, kw, *_, oh, ow = geo
    n, c = x.shape[:2]
    o, rows, kk = W.shape[0], oh * ow, c * kh * kw
    xpad = im.pad_nchw(x, pads, xp, pooled=True)
    cols = scratch(xp, (kk + (bias is not None), n * rows), x.dtype)
    cols6 = cols[:kk].reshape(c, kh, kw, n, oh, ow)
    wk = W.reshape(o, kk)
    if bias is not None:
        cols[kk] = 1
        wk = xp.concatenate([wk, bias.reshape(o, 1)], axis=1)

    def piece(slices):
        for i0, i1 in slices:
            xp.copyto(cols6[:, :, :, i0:i1], im.windows_kmajor(xp, xpad[i0:i1], *geo))
            out = y2[i0 * rows : i1 * rows]
            xp.matmul(cols[:, i0 * rows : i1 * rows].T, wk.T, out=out)
            epi(out, i0, i1)

    sl.run_slices(xp, piece, sl.batch_slices(xp, n, cols.shape[0] * rows * x.itemsize, o), cols.size * o)
    return cols, wk
