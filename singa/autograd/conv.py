"""Convolution: :func:`conv2d` (stride, asymmetric padding, dilation, groups).

Forward is a matrix product: the input windows are copied into a column matrix
(im2col through a strided view) and multiplied by the reshaped filters. Two column layouts are used:

- pixel-major, (N*OH*OW, kh*kw*C) from an NHWC view of the input: the general case;
- kernel-major, (C*kh*kw [+1], N*OH*OW) from the NCHW input, for inputs with few
  channels laid out NCHW (first layers, e.g. one grey-scale channel): each copied row
  is a run of OW contiguous pixels instead of C, and an extra row of ones carries the
  bias through the product.

Either way the product comes out as (N*OH*OW, O), so the output is an NCHW array
whose memory is NHWC (strides (OH*OW*O, 1, OW*O, O)); later convolutions, pooling,
BatchNorm and elementwise operators keep that layout, which makes col2im and pooling
much faster (``bench/README.md``, "Design measurements"). An ungrouped pixel-major
convolution makes and multiplies its columns a few samples at a time (about
``_CHUNK_BYTES`` each), so the copy and the product meet in the cache and only the
padded input is kept for backward (not the kh*kw times larger columns).

Backward: dW is one product per slice with the columns made again from the padded
input (or the cached columns of the other layouts); dx (skipped when the input needs
no gradient, e.g. the first layer) is, for stride 1, a convolution of the padded dy
with the flipped filters (columns of dy times (kh*kw*O, C)); otherwise one product
per kernel offset, (N*OH*OW, O) @ (O, C), added into the padded NHWC gradient by
contiguous blocks (col2im). Large arrays come from the buffer pool of
:mod:`singa.autograd.buffers` (copies can optionally be split across threads along
the batch: ``_im2col.split_batch``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

import singa.autograd._im2col as im
import singa.autograd.conv_depthwise as depthwise
import singa.autograd.conv_geometry as geo
from singa.autograd.buffers import scratch
from singa.autograd.engine import Operation, array_module, check_same_dtype
from singa.tensor import Tensor

__all__ = ["conv2d"]

# inputs with at most this many channels (per group 1), laid out NCHW, use the
# kernel-major column layout
_KMAJOR_MAX_C = 4
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


class Conv2d(Operation):
    """y = conv2d(x, W) + b on NCHW arrays (cross-correlation, as in every framework).

    Attributes (read by graph replay and the ONNX exporter):
        kernel_size: (kh, kw).
        stride: (sh, sw).
        pads: (top, left, bottom, right), ONNX ``pads`` order.
        dilation: (dh, dw).
        groups: number of groups (C for a depthwise convolution).
        bias: whether a bias is the third input.
    """

    def __init__(
        self,
        kernel_size: tuple[int, int],
        stride: tuple[int, int] = (1, 1),
        pads: tuple[int, int, int, int] = (0, 0, 0, 0),
        dilation: tuple[int, int] = (1, 1),
        groups: int = 1,
        bias: bool = False,
    ):
        super().__init__()
        self.kernel_size = tuple(kernel_size)
        self.stride = tuple(stride)
        self.pads = tuple(pads)
        self.dilation = tuple(dilation)
        self.groups = groups
        self.bias = bias

    def _geometry(self, x_shape: tuple) -> tuple:
        n, c, h, w = x_shape
        kh, kw = self.kernel_size
        sh, sw = self.stride
        dh, dw = self.dilation
        t, l, b, r = self.pads
        oh = geo.out_size(h, kh, sh, t, b, dh)
        ow = geo.out_size(w, kw, sw, l, r, dw)
        return n, c, h, w, kh, kw, sh, sw, dh, dw, oh, ow

    def forward(self, x, W, b=None):
        if depthwise.applies(self, x.shape, W.shape):
            return depthwise.forward(self, x, W, b)
        xp = array_module(x)
        n, c, h, w, kh, kw, sh, sw, dh, dw, oh, ow = self._geometry(x.shape)
        o = W.shape[0]
        g = self.groups
        cg, og = c // g, o // g
        m = n * oh * ow
        geo = (kh, kw, sh, sw, dh, dw, oh, ow)
        kmajor = g == 1 and c <= _KMAJOR_MAX_C and not im.is_channels_last(x)
        y2 = scratch(xp, (m, o), x.dtype)
        if g == 1 and not kmajor:
            # columns (rows of kh*kw*C) made and multiplied a few samples at a time, so
            # they stay in cache; the padding is done per slice too, so no padded copy
            # of the input is made or kept (backward makes the columns again from x)
            xh = x.transpose(0, 2, 3, 1)
            wk = W.transpose(2, 3, 1, 0).reshape(kh * kw * c, o)
            rows = oh * ow
            for i0, i1, cb in _column_chunks(xp, xh, geo, self.pads, o):
                xp.matmul(cb, wk, out=y2[i0 * rows : i1 * rows])
            if b is not None:
                y2 += b.astype(y2.dtype, copy=False)
            cols = x
        xpad = None if g == 1 and not kmajor else im.pad_nchw(x, self.pads, xp, pooled=True)
        if kmajor:
            # cols: rows (C, kh, kw) of length M = (N, OH, OW), plus a row of ones
            # that carries the bias through the product (and gives db in backward)
            kk = c * kh * kw
            cols = scratch(xp, (kk + (b is not None), m), x.dtype)
            cols6 = cols[:kk].reshape(c, kh, kw, n, oh, ow)

            def im2col(i0, i1):
                xp.copyto(cols6[:, :, :, i0:i1], im.windows_kmajor(xp, xpad[i0:i1], *geo))

            im.split_batch(xp, im2col, n, cols.size)
            del xpad
            wk = W.reshape(o, kk)
            if b is not None:
                cols[kk] = 1
                wk = xp.concatenate([wk, b.reshape(o, 1).astype(wk.dtype, copy=False)], axis=1)
            xp.matmul(cols.T, wk.T, out=y2)
        elif g > 1:
            # cols (N, OH, OW, G, kh, kw, C/G); W as (G, kh*kw*C/G, O/G)
            cols = scratch(xp, (n, oh, ow, g, kh, kw, cg), x.dtype)
            xh = xpad.transpose(0, 2, 3, 1)

            def im2col(i0, i1):
                xp.copyto(cols[i0:i1], im.windows(xp, xh[i0:i1], *geo, g))

            im.split_batch(xp, im2col, n, cols.size)
            del xpad, xh
            kg = kh * kw * cg
            wk = W.reshape(g, og, cg, kh, kw).transpose(0, 3, 4, 2, 1).reshape(g, kg, og)
            y3 = xp.matmul(cols.reshape(m, g, kg).transpose(1, 0, 2), wk)
            y2.reshape(m, g, og)[...] = y3.transpose(1, 0, 2)
            if b is not None:
                y2 += b.astype(y2.dtype, copy=False)
        if self.requires_grad:
            self.cache = (
                x.shape,
                W.shape,
                kmajor,
                cols if self.needs_grad[1] else None,
                (W if g == 1 and not kmajor else wk) if self.needs_grad[0] else None,
            )
        return y2.reshape(n, oh, ow, o).transpose(0, 3, 1, 2)

    def _dx_as_convolution(self, x_shape: tuple) -> bool:
        """Whether dx of this (ungrouped) convolution is computed as a stride-1
        convolution of the padded dy with the flipped filters (:meth:`_grads_stride1`):
        stride 1, no side padded by more than the dilated kernel's reach, and an
        output about as large as the input ("same" padding; for a "valid" one the
        products would mostly multiply the zero border)."""
        (kh, kw), (dh, dw), (t, l, b, r) = self.kernel_size, self.dilation, self.pads
        n, c, h, w = x_shape
        oh, ow = h + t + b - dh * (kh - 1), w + l + r - dw * (kw - 1)
        return (
            self.stride == (1, 1)
            and max(t, b) <= dh * (kh - 1)
            and max(l, r) <= dw * (kw - 1)
            and 4 * h * w <= 5 * oh * ow
        )

    def _grads_stride1(self, xp: Any, dy: Any, W: Any, x_shape: tuple, x: Any) -> tuple:
        """dx, and dW when the input ``x`` (N, C, H, W) is given, of a stride-1
        convolution from one set of columns: dy (N, O, OH, OW), placed in a zero border
        so that every input pixel sees all its kernel offsets, is copied into columns
        (N*H*W, kh*kw*O) a batch slice at a time (bordered a slice at a time, so no
        padded copy of dy is made); each slice times the flipped filters
        (kh*kw*O, C) gives dx, and the input's pixels (C, N*H*W) times the same slice give
        dW with flipped offsets. One long product each instead of kh*kw short ones plus
        a col2im, and no second set of columns for dW. dx is NCHW with NHWC memory."""
        n, c, h, w = x_shape
        o, oh, ow = dy.shape[1:]
        (kh, kw), (dh, dw), (t, l, _, _) = self.kernel_size, self.dilation, self.pads
        pt, pl = dh * (kh - 1) - t, dw * (kw - 1) - l
        pads = (pt, pl, h + dh * (kh - 1) - pt - oh, w + dw * (kw - 1) - pl - ow)
        wf = W[:, :, ::-1, ::-1].transpose(2, 3, 0, 1).reshape(kh * kw * o, c)
        dxh = scratch(xp, (n, h, w, c), dy.dtype)
        dx2 = dxh.reshape(n * h * w, c)
        g = None if x is None else xp.zeros((c, kh * kw * o), dy.dtype)
        xh = None if x is None else x.transpose(0, 2, 3, 1)
        dyh = dy.transpose(0, 2, 3, 1)
        for i0, i1, cb in _column_chunks(xp, dyh, (kh, kw, 1, 1, dh, dw, h, w), pads, min(c, o)):
            xp.matmul(cb, wf, out=dx2[i0 * h * w : i1 * h * w])
            if g is not None:  # free view of x when its memory is NHWC
                g += xh[i0:i1].reshape((i1 - i0) * h * w, c).T @ cb
        dW = None
        if g is not None:  # g[c, i', j', o] = dW[o, c, kh-1-i', kw-1-j']
            dW = xp.ascontiguousarray(g.reshape(c, kh, kw, o)[:, ::-1, ::-1].transpose(3, 0, 1, 2))
        return dxh.transpose(0, 3, 1, 2), dW

    def backward(self, dy):
        if depthwise.is_cached(self):
            return depthwise.backward(self, dy)
        x_shape, w_shape, kmajor, cols, wk = self.cache
        xp = array_module(dy)
        n, c, h, w, kh, kw, sh, sw, dh, dw, oh, ow = self._geometry(x_shape)
        geo = (kh, kw, sh, sw, dh, dw, oh, ow)
        o = w_shape[0]
        g = self.groups
        cg, og = c // g, o // g
        m = n * oh * ow
        t, l, b, r = self.pads
        hp, wp = h + t + b, w + l + r
        dyh = dy.transpose(0, 2, 3, 1).reshape(m, o)  # free when dy is NHWC in memory
        dx = dW = db = None
        want_db = self.bias and self.needs_grad[2]
        if kmajor:
            kk = c * kh * kw
            if cols is not None:
                dwt = cols @ dyh  # (kk [+1], O); the ones row gives db
                dW = xp.ascontiguousarray(dwt[:kk].T).reshape(w_shape)
                if want_db:
                    db = dwt[kk].copy()
            if wk is not None:
                dcols = scratch(xp, (kk, m), dy.dtype)
                xp.matmul(wk[:, :kk].T, dyh.T, out=dcols)
                dc6 = dcols.reshape(c, kh, kw, n, oh, ow)
                dxp = scratch(xp, (n, c, hp, wp), dy.dtype)

                def col2im(i0, i1):
                    dxp[i0:i1] = 0
                    im.col2im_kmajor(dc6[:, :, :, i0:i1], dxp[i0:i1], *geo)

                im.split_batch(xp, col2im, n, dcols.size)
                dx = dxp[:, :, t : t + h, l : l + w]
        elif g == 1 and wk is not None and self._dx_as_convolution(x_shape):
            dx, dW = self._grads_stride1(xp, dy, wk, x_shape, cols)
        else:
            kg = kh * kw * cg
            if cols is not None:
                if g == 1:  # cols is the input x: make the columns again
                    dwk = xp.zeros((o, kg), dy.dtype)  # (O, kh*kw*C)
                    rows = oh * ow
                    xh = cols.transpose(0, 2, 3, 1)
                    for i0, i1, cb in _column_chunks(xp, xh, geo, self.pads, o):
                        dwk += dyh[i0 * rows : i1 * rows].T @ cb
                else:
                    dwk = xp.matmul(
                        dyh.reshape(m, g, og).transpose(1, 2, 0), cols.reshape(m, g, kg).transpose(1, 0, 2)
                    )  # (G, O/G, kh*kw*C/G)
                dW = xp.ascontiguousarray(dwk.reshape(o, kh, kw, cg).transpose(0, 3, 1, 2))
            if wk is not None and g == 1:
                # one product per kernel offset: dcols (kh, kw, M, C), so that col2im adds
                # contiguous (OW, C) blocks (2x faster than columns laid out (M, kh*kw*C))
                wb = wk.transpose(2, 3, 0, 1).reshape(kh * kw, o, c)  # wk is W here
                dcols = scratch(xp, (kh * kw, m, c), dy.dtype)
                xp.matmul(dyh[None], wb, out=dcols)
                dc6 = dcols.reshape(kh, kw, n, oh, ow, c)
                dxh = scratch(xp, (n, hp, wp, c), dy.dtype)

                def col2im(i0, i1):
                    dxh[i0:i1] = 0
                    im.col2im_offsets(dc6[:, :, i0:i1], dxh[i0:i1], *geo)

                im.split_batch(xp, col2im, n, dcols.size)
                dx = dxh[:, t : t + h, l : l + w, :].transpose(0, 3, 1, 2)
            elif wk is not None:
                dcols = scratch(xp, (g, m, kg), dy.dtype)
                xp.matmul(dyh.reshape(m, g, og).transpose(1, 0, 2), wk.transpose(0, 2, 1), out=dcols)
                dc7 = dcols.reshape(g, n, oh, ow, kh, kw, cg).transpose(1, 2, 3, 0, 4, 5, 6)
                dxh = scratch(xp, (n, hp, wp, c), dy.dtype)
                dx5 = dxh.reshape(n, hp, wp, g, cg)

                def col2im(i0, i1):
                    dxh[i0:i1] = 0
                    im.col2im_nhwc(dc7[i0:i1], dx5[i0:i1], *geo)

                im.split_batch(xp, col2im, n, dcols.size)
                dx = dxh[:, t : t + h, l : l + w, :].transpose(0, 3, 1, 2)
        if want_db and db is None:
            db = xp.ones(m, dtype=dy.dtype) @ dyh
        if self.bias:
            return dx, dW, db
        return dx, dW


def _column_chunks(
    xp: Any, xh: Any, geo: tuple, pads: tuple = (0, 0, 0, 0), width: int = 0
) -> Iterator[tuple[int, int, Any]]:
    """Yield ``(i0, i1, cols)``: the columns (rows (i1-i0)*OH*OW, kh*kw*C) of the
    windows of samples ``i0:i1`` of ``xh`` (N, H, W, C, any strides) zero-padded by
    ``pads`` (top, left, bottom, right), for batch slices of about ``_CHUNK_BYTES`` of
    columns (the whole batch on a GPU; ``_SKINNY_CHUNK_BYTES`` when the products that
    use them have ``width`` <= ``_SKINNY_MAX_O`` output columns). Each slice is padded into a small reused
    buffer, so no padded copy of the whole input is made (the cached padded inputs were
    most of a ResNet's peak memory above its activations). The columns live in one
    reused buffer: use each before taking the next."""
    kh, kw, _, _, _, _, oh, ow = geo
    n, h, w, c = xh.shape
    t, l, b, r = pads
    per_sample = oh * ow * kh * kw * c
    budget = _SKINNY_CHUNK_BYTES if 0 < width <= _SKINNY_MAX_O else _CHUNK_BYTES
    step = n if xp is not np else max(1, min(n, budget // (per_sample * xh.itemsize)))
    buf = scratch(xp, (step, oh, ow, 1, kh, kw, c), xh.dtype)
    padded = None if t == l == b == r == 0 else scratch(xp, (step, h + t + b, w + l + r, c), xh.dtype)
    for i0 in range(0, n, step):
        i1 = min(i0 + step, n)
        src = xh[i0:i1]
        if padded is not None:
            src = _pad_slice(padded[: i1 - i0], src, pads)
        cb = buf[: i1 - i0]
        xp.copyto(cb, im.windows(xp, src, *geo))
        yield i0, i1, cb.reshape((i1 - i0) * oh * ow, kh * kw * c)


def _pad_slice(out: Any, src: Any, pads: tuple) -> Any:
    """``src`` (n, H, W, C) copied into the middle of ``out`` (n, H+t+b, W+l+r, C),
    whose border is zeroed; returns ``out``."""
    t, l, b, r = pads
    h, w = src.shape[1:3]
    out[:, :t] = 0
    out[:, t + h :] = 0
    out[:, t : t + h, :l] = 0
    out[:, t : t + h, l + w :] = 0
    out[:, t : t + h, l : l + w] = src
    return out


def conv2d(
    x: Tensor,
    W: Tensor,
    b: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """2-D convolution (cross-correlation) of NCHW ``x`` with filters ``W``.

    Args:
        x: input of shape (N, C, H, W).
        W: filters of shape (O, C/groups, kh, kw).
        b: bias of shape (O,), or None.
        stride: int or (sh, sw).
        padding: int, (ph, pw), or (top, left, bottom, right) (ONNX ``pads`` order
            [h_begin, w_begin, h_end, w_end]); zero padding.
        dilation: int or (dh, dw).
        groups: split the channels into this many groups (``groups = C`` and
            ``W.shape[1] == 1`` is a depthwise convolution).

    Returns:
        y of shape (N, O, OH, OW) with OH = (H + top + bottom - dh*(kh-1) - 1)//sh + 1.
        The result's memory is NHWC (an NCHW view); that is invisible to the API.

    Example::

        y = autograd.conv2d(x, w, b, stride=1, padding=2)
    """
    if x.ndim() != 4 or W.ndim() != 4:
        raise ValueError(
            f"conv2d: x must be (N, C, H, W) and W (O, C/groups, kh, kw), got {x.shape} and {W.shape}"
        )
    check_same_dtype("conv2d", x, W, b, floating=True)
    groups = int(groups)
    stride_ = geo.pair(stride, "stride", "conv2d")
    dilation_ = geo.pair(dilation, "dilation", "conv2d")
    pads = geo.pads4(padding, "conv2d")
    n, c, h, w = x.shape
    o, cg, kh, kw = W.shape
    if groups < 1 or c != cg * groups or o % groups:
        raise ValueError(
            f"conv2d: x of shape {x.shape} and W of shape {W.shape} do not match with groups={groups} "
            "(need C == W.shape[1] * groups and O % groups == 0)"
        )
    if b is not None and tuple(b.shape) != (o,):
        raise ValueError(f"conv2d: bias of shape {b.shape} does not match W of shape {W.shape} (need ({o},))")
    oh = geo.out_size(h, kh, stride_[0], pads[0], pads[2], dilation_[0])
    ow = geo.out_size(w, kw, stride_[1], pads[1], pads[3], dilation_[1])
    if oh <= 0 or ow <= 0 or n == 0 or o == 0:
        raise ValueError(
            f"conv2d: output would be empty for x of shape {x.shape}, W of shape {W.shape}, "
            f"stride={stride_}, pads={pads}, dilation={dilation_} (output {n}x{o}x{oh}x{ow})"
        )
    op = Conv2d((kh, kw), stride_, pads, dilation_, groups, bias=b is not None)
    if b is None:
        return op(x, W)[0]
    return op(x, W, b)[0]
