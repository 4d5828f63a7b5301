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
much faster (``bench/README.md``, "Design measurements"). An ungrouped convolution
makes and multiplies its columns a few samples at a time (about ``_CHUNK_BYTES``
each), so the copy and the product meet in the cache and only the input is kept for
backward (not the kh*kw times larger columns).

Backward: dW is one product per slice with the columns made again from the input
(or the cached kernel-major columns); dx (skipped when the input needs no gradient,
e.g. the first layer) is, for stride 1, a convolution of the padded dy with the
flipped filters (columns of dy times (kh*kw*O, C)); otherwise one product per kernel
offset, (rows, O) @ (O, C), added into the padded NHWC gradient by contiguous blocks
(col2im). Large arrays come from the buffer pool of :mod:`singa.kernels.buffers`.

Threads: the batch slices of every ungrouped kernel (forward, dx, dW) are independent
pieces run on :mod:`singa.kernels.workers`, each making its own columns and products
on one BLAS thread; the slices depend only on the shapes and the weight-gradient
partials are added in slice order, so results are bitwise the same on any number of
workers (see "batch slices on the workers" below). Grouped convolutions copy their
columns in batch slices too (``im2col.split_batch``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from singa.autograd.engine import Operation, check_same_dtype
from singa.device import array_module
from singa.kernels import blas_threads, workers
from singa.kernels import conv_depthwise as depthwise
from singa.kernels import conv_geometry as geo
from singa.kernels import im2col as im
from singa.kernels.buffers import scratch
from singa.kernels.conv_epilogue import Epilogue
from singa.tensor import Tensor

__all__ = ["conv2d"]

_KMAJOR_MAX_C = 4  # inputs of at most this many channels (per group 1), NCHW: kernel-major columns
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
# the weight-gradient partials of a convolution's batch slices (kept until they are
# added in slice order) take at most about this many bytes: runs of several slices
# share one partial when the filters are large
_PARTIALS_BYTES = 16 << 20
# consecutive batch slices handed to a worker as one piece
_SLICES_PER_PIECE = 1
# a convolution whose batch fits one slice runs its products on one BLAS thread when
# they take fewer multiply-adds than this: batch-1 3x3 convolutions of 16-64 channels
# (2-2.4 M) took 0.18-0.23 ms on one thread against 0.23-0.32 ms on two (minima of
# interleaved blocks, load 9), and two threads under load cost up to 12 ms a call
_ONE_THREAD_MACS = 1 << 24


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

    def output_shape(self, x_shape: tuple, W_shape: tuple) -> tuple:
        """The shape (N, O, OH, OW) of this convolution's output for these shapes."""
        geo = self._geometry(x_shape)
        return (x_shape[0], W_shape[0], geo[-2], geo[-1])

    def forward(self, x, W, b=None, *, relu=False, residual=None, pool=None, affine=None):
        """y (N, O, OH, OW), NCHW with NHWC memory. Evaluation only (the backward cache
        does not know about them; :class:`singa.model.fused.ConvForward` uses them):
        ``affine``, (m, a, b) per channel, y = (y - m) * a + b (BatchNorm's evaluation),
        ``residual``, an array of y's shape and dtype, added to y, ``relu``, max(y, 0)
        after it, and ``pool``, ``(kh, kw, sh, sw)`` of a max-pool without padding
        applied last (y is then the pooled output), each done to a batch slice as it
        is made, while it is in cache (:class:`~singa.kernels.conv_epilogue.Epilogue`)."""
        xp = array_module(x)
        fused = relu or residual is not None or pool is not None or affine is not None
        if depthwise.applies(self, x.shape, W.shape):
            y = depthwise.forward(self, x, W, b)
            if not fused:
                return y
            shape = (y.shape[0], *y.shape[2:], y.shape[1])
            epi = Epilogue(xp, shape, y.dtype, relu=relu, residual=residual, pool=pool, affine=affine)
            y2 = xp.ascontiguousarray(y.transpose(0, 2, 3, 1)).reshape(-1, y.shape[1])
            epi(y2, 0, y.shape[0])
            return epi.output(y2)
        n, c, h, w, kh, kw, sh, sw, dh, dw, oh, ow = self._geometry(x.shape)
        o = W.shape[0]
        g = self.groups
        cg, og = c // g, o // g
        m = n * oh * ow
        geo = (kh, kw, sh, sw, dh, dw, oh, ow)
        kmajor = g == 1 and c <= _KMAJOR_MAX_C and not im.is_channels_last(x)
        y2 = scratch(xp, (m, o), x.dtype)
        bias = None if b is None else b.astype(y2.dtype, copy=False)
        # the kernel-major product carries the bias itself
        epi = Epilogue(
            xp,
            (n, oh, ow, o),
            x.dtype,
            bias=None if kmajor else bias,
            relu=relu,
            residual=residual,
            pool=pool,
            affine=affine,
        )
        if kmajor:
            cols, wk = self._forward_kmajor(xp, x, W, bias, y2, geo, epi)
        elif g == 1:
            self._forward_sliced(xp, x, W, y2, geo, epi)
            cols, wk = x, W  # backward makes the columns again from x
        else:
            # cols (N, OH, OW, G, kh, kw, C/G); W as (G, kh*kw*C/G, O/G)
            xpad = im.pad_nchw(x, self.pads, xp, pooled=True)
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
            epi(y2, 0, n)
        if self.requires_grad:
            self.cache = (
                x.shape,
                W.shape,
                kmajor,
                cols if self.needs_grad[1] else None,
                wk if self.needs_grad[0] else None,
            )
        return epi.output(y2)

    def _forward_sliced(self, xp: Any, x: Any, W: Any, y2: Any, geo: tuple, epi: Epilogue) -> None:
        """Pixel-major columns (rows of kh*kw*C) made and multiplied a batch slice at a
        time into ``y2`` (N*OH*OW, O), the slices on the workers: the copy and the product
        meet in the cache, and the padding is done per slice too, so no padded copy of
        the input is made or kept. ``epi`` finishes each slice."""
        kh, kw, *_, oh, ow = geo
        n, c = x.shape[:2]
        o, rows = W.shape[0], oh * ow
        xh = x.transpose(0, 2, 3, 1)
        wk = _laid_out(xp, W.transpose(2, 3, 1, 0), (kh * kw * c, o))

        def piece(slices):
            for i0, i1, cb in _column_chunks(xp, xh, geo, self.pads, slices):
                out = y2[i0 * rows : i1 * rows]
                xp.matmul(cb, wk, out=out)
                epi(out, i0, i1)

        _run_slices(
            xp, piece, _batch_slices(xp, n, rows * kh * kw * c * x.itemsize, o), n * rows * kh * kw * c * o
        )

    def _forward_kmajor(
        self, xp: Any, x: Any, W: Any, bias: Any, y2: Any, geo: tuple, epi: Epilogue
    ) -> tuple:
        """Kernel-major columns: rows (C, kh, kw) of length M = (N, OH, OW), plus a row
        of ones that carries the bias through the product (and gives db in backward),
        copied and multiplied a batch slice at a time on the workers, each finished by
        ``epi``. Returns the columns and the filters as (O, C*kh*kw [+1]), both kept
        for backward."""
        kh, kw, *_, oh, ow = geo
        n, c = x.shape[:2]
        o, rows, kk = W.shape[0], oh * ow, c * kh * kw
        xpad = im.pad_nchw(x, self.pads, xp, pooled=True)
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

        _run_slices(xp, piece, _batch_slices(xp, n, cols.shape[0] * rows * x.itemsize, o), cols.size * o)
        return cols, wk

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
        a col2im, and no second set of columns for dW. dx is NCHW with NHWC memory. The
        slices run on the workers; their dW partials are added in slice order."""
        n, c, h, w = x_shape
        o, oh, ow = dy.shape[1:]
        (kh, kw), (dh, dw), (t, l, _, _) = self.kernel_size, self.dilation, self.pads
        pt, pl = dh * (kh - 1) - t, dw * (kw - 1) - l
        pads = (pt, pl, h + dh * (kh - 1) - pt - oh, w + dw * (kw - 1) - pl - ow)
        wf = _laid_out(xp, W[:, :, ::-1, ::-1].transpose(2, 3, 0, 1), (kh * kw * o, c))
        dxh = scratch(xp, (n, h, w, c), dy.dtype)
        dx2, rows = dxh.reshape(n * h * w, c), h * w
        xh = None if x is None else x.transpose(0, 2, 3, 1)
        dyh = dy.transpose(0, 2, 3, 1)

        def piece(slices):
            part = None
            for i0, i1, cb in _column_chunks(xp, dyh, (kh, kw, 1, 1, dh, dw, h, w), pads, slices):
                xp.matmul(cb, wf, out=dx2[i0 * rows : i1 * rows])
                if xh is not None:  # a free view of x when its memory is NHWC
                    part = _accumulate(part, xh[i0:i1].reshape((i1 - i0) * rows, c).T @ cb)
            return part

        slices = _batch_slices(xp, n, rows * kh * kw * o * dy.itemsize, min(c, o))
        parts = _run_slices(xp, piece, slices, n * rows * kh * kw * o * c, c * kh * kw * o * dy.itemsize)
        dW = None
        if xh is not None:  # g[c, i', j', o] = dW[o, c, kh-1-i', kw-1-j']
            g = _sum_in_order(parts)
            dW = xp.ascontiguousarray(g.reshape(c, kh, kw, o)[:, ::-1, ::-1].transpose(3, 0, 1, 2))
        return dxh.transpose(0, 3, 1, 2), dW

    def _backward_sliced(self, xp: Any, dyh: Any, x: Any, W: Any, x_shape: tuple, geo: tuple) -> tuple:
        """dx and dW of an ungrouped pixel-major convolution, a batch slice at a time on
        the workers: dW from the columns of ``x`` made again (when ``x`` is given; the
        partials are added in slice order), dx (when ``W`` is given) from one product
        per kernel offset, (rows, O) @ (O, C) into (kh, kw, rows, C), so that col2im adds
        contiguous (OW, C) blocks (2x faster than columns laid out (rows, kh*kw*C))."""
        n, c, h, w = x_shape
        kh, kw, *_, oh, ow = geo
        o, rows, kk = dyh.shape[1], oh * ow, kh * kw * c
        t, l, b, r = self.pads
        if x is None and W is None:
            return None, None
        xh = None if x is None else x.transpose(0, 2, 3, 1)
        wb = None if W is None else _laid_out(xp, W.transpose(2, 3, 0, 1), (kh * kw, o, c))
        dxh = None if W is None else scratch(xp, (n, h + t + b, w + l + r, c), dyh.dtype)
        slices = _batch_slices(xp, n, rows * kk * dyh.itemsize, o)
        most = max(i1 - i0 for i0, i1 in slices) * rows * kk

        def piece(part_slices):
            part = None
            if xh is not None:
                for i0, i1, cb in _column_chunks(xp, xh, geo, self.pads, part_slices):
                    part = _accumulate(part, dyh[i0 * rows : i1 * rows].T @ cb)
            if dxh is not None:
                buf = scratch(xp, (most,), dyh.dtype)
                for i0, i1 in part_slices:
                    dcols = buf[: (i1 - i0) * rows * kk].reshape(kh * kw, (i1 - i0) * rows, c)
                    xp.matmul(dyh[None, i0 * rows : i1 * rows], wb, out=dcols)
                    dxh[i0:i1] = 0
                    im.col2im_offsets(dcols.reshape(kh, kw, i1 - i0, oh, ow, c), dxh[i0:i1], *geo)
            return part

        parts = _run_slices(xp, piece, slices, n * rows * kk * o, 0 if xh is None else o * kk * dyh.itemsize)
        dW = None if xh is None else _sum_in_order(parts).reshape(o, kh, kw, c).transpose(0, 3, 1, 2)
        dx = None if dxh is None else dxh[:, t : t + h, l : l + w, :].transpose(0, 3, 1, 2)
        return dx, None if dW is None else xp.ascontiguousarray(dW)

    def _backward_kmajor(self, xp: Any, dyh: Any, cols: Any, wk: Any, x_shape: tuple, geo: tuple) -> tuple:
        """(dx, dwt) of a kernel-major convolution, a batch slice at a time on the
        workers: dwt (C*kh*kw [+1], O) = cols @ dy from the cached columns (when given;
        the ones row gives db; the partials are added in slice order), dx from the
        columns' gradient (C*kh*kw, rows) = W.T @ dy.T by col2im (when ``wk`` is given)."""
        n, c, h, w = x_shape
        kh, kw, *_, oh, ow = geo
        rows, kk = oh * ow, c * kh * kw
        t, l, b, r = self.pads
        if cols is None and wk is None:
            return None, None
        dxp = None if wk is None else scratch(xp, (n, c, h + t + b, w + l + r), dyh.dtype)
        slices = _batch_slices(xp, n, (kk + 1) * rows * dyh.itemsize, dyh.shape[1])
        most = max(i1 - i0 for i0, i1 in slices) * rows * kk

        def piece(part_slices):
            part = None
            buf = None if dxp is None else scratch(xp, (most,), dyh.dtype)
            for i0, i1 in part_slices:
                d = dyh[i0 * rows : i1 * rows]
                if cols is not None:
                    part = _accumulate(part, cols[:, i0 * rows : i1 * rows] @ d)
                if buf is not None:
                    dcols = buf[: kk * len(d)].reshape(kk, len(d))
                    xp.matmul(wk[:, :kk].T, d.T, out=dcols)
                    dxp[i0:i1] = 0
                    im.col2im_kmajor(dcols.reshape(c, kh, kw, i1 - i0, oh, ow), dxp[i0:i1], *geo)
            return part

        partial = 0 if cols is None else cols.shape[0] * dyh.shape[1] * dyh.itemsize
        parts = _run_slices(xp, piece, slices, dyh.size * (kk + 1), partial)
        dx = None if dxp is None else dxp[:, :, t : t + h, l : l + w]
        return dx, None if cols is None else _sum_in_order(parts)

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
            dx, dwt = self._backward_kmajor(xp, dyh, cols, wk, x_shape, geo)
            if dwt is not None:
                kk = c * kh * kw
                dW = xp.ascontiguousarray(dwt[:kk].T).reshape(w_shape)
                if want_db:
                    db = dwt[kk].copy()
        elif g == 1 and wk is not None and self._dx_as_convolution(x_shape):
            dx, dW = self._grads_stride1(xp, dy, wk, x_shape, cols)
        elif g == 1:
            dx, dW = self._backward_sliced(xp, dyh, cols, wk, x_shape, geo)
        else:
            kg = kh * kw * cg
            if cols is not None:
                dwk = xp.matmul(
                    dyh.reshape(m, g, og).transpose(1, 2, 0), cols.reshape(m, g, kg).transpose(1, 0, 2)
                )  # (G, O/G, kh*kw*C/G)
                dW = xp.ascontiguousarray(dwk.reshape(o, kh, kw, cg).transpose(0, 3, 1, 2))
            if wk is not None:
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


# ----- batch slices on the workers ---------------------------------------------------------------
# Threading: numpy runs the im2col copies and col2im on one core, and on the skinny
# products of a convolution (a few dozen output columns, a long inner dimension)
# OpenBLAS's second thread mostly waits, so before this the convolutions used a second
# core poorly (bench/README.md: a second thread sped PyTorch's CNN step up 1.3-1.9x,
# ours 0.9-1.5x, while our CPU time per step doubled). Each batch slice makes its own
# columns and products instead, the slices spread over singa.kernels.workers with
# BLAS on one thread each: copies, col2im and products all run on every core, no
# product hands work between BLAS threads, and a worker that is preempted holds up
# one slice, not the whole product. What it saved, on a 2-core VM loaded by other
# jobs (so indicative; bench/README.md, bench_conv_threads.py): CPU time per ResNet-20
# graph step 1.35-1.6 s against 3.3-8.5 s before (bench_graph.py pairs, load 7-9);
# single convolutions 1.15-1.65x faster on two workers than on one; on one core the
# slicing costs up to 10 % more work. The slices depend only on the shapes, the weight-gradient partials
# are added in slice order, and the products always run on one BLAS thread, so the
# bits do not depend on the worker count.


def _batch_slices(xp: Any, n: int, per_sample: int, width: int) -> list[tuple[int, int]]:
    """``range(n)`` cut into even ``(start, stop)`` slices of about ``_CHUNK_BYTES``
    (``_SKINNY_CHUNK_BYTES`` when the products have ``width`` <= ``_SKINNY_MAX_O``
    output columns) when a sample's columns take ``per_sample`` bytes: an even number
    of slices when there are several, so that two workers finish together (the whole
    batch on a GPU)."""
    if xp is not np:
        return [(0, n)]
    budget = _SKINNY_CHUNK_BYTES if 0 < width <= _SKINNY_MAX_O else _CHUNK_BYTES
    count = -(-n * per_sample // budget)
    return workers.even_pieces(n, count + (count > 1 and count % 2))


def _run_slices(xp: Any, fn: Any, slices: list, macs: int, partial_bytes: int = 0) -> list:
    """``fn(run)`` for runs of ``_SLICES_PER_PIECE`` consecutive ``slices`` (an even
    number of runs when there are several), on the workers with BLAS on one thread,
    results in order. When each run returns a partial sum of ``partial_bytes``, fewer
    and longer runs keep all partials under ``_PARTIALS_BYTES``. A single run (small
    work: the batch in one slice, or a GPU) is called inline, since a hand-off to a
    worker costs 20-50 us: on one BLAS thread when its products take fewer than
    ``_ONE_THREAD_MACS`` multiply-adds (``macs``, of the largest kind of product), on
    BLAS's own threads otherwise."""
    if len(slices) == 1:  # the common batch-1 case, without the pieces' bookkeeping
        if xp is not np or macs >= _ONE_THREAD_MACS:
            return [fn(slices)]
        with blas_threads.limit(1):
            return [fn(slices)]
    runs = -(-len(slices) // _SLICES_PER_PIECE)
    runs += runs > 1 and runs % 2
    if partial_bytes:
        runs = min(runs, max(2, _PARTIALS_BYTES // partial_bytes))
    parts = [(slices[a:b],) for a, b in workers.even_pieces(len(slices), runs)]
    if xp is not np or (len(parts) < 2 and macs >= _ONE_THREAD_MACS):
        return [fn(*p) for p in parts]
    with blas_threads.limit(1):  # also with one worker: the same products as with two
        return workers.run_pieces(fn, parts, xp)


def _laid_out(xp: Any, view: Any, shape: tuple) -> Any:
    """The filters ``view`` (a transposed view of W) copied into a pooled array and
    reshaped to ``shape`` for the products: a fresh copy on every call is page-faulted
    in anew once it is above glibc's mmap threshold (128 KB: a 64x64 3x3 filter bank).
    Filters already laid out so (:func:`product_layout`) are used as they are."""
    if view.flags.c_contiguous:
        return view.reshape(shape)
    out = scratch(xp, view.shape, view.dtype)
    xp.copyto(out, view)
    return out.reshape(shape)


def product_layout(W: Any, groups: int = 1) -> Any:
    """Filters ``W`` (O, C, kh, kw) as a view of a copy laid out (kh, kw, C, O) in memory,
    the layout in which the pixel-major forward multiplies them (an ungrouped
    convolution of more than ``_KMAJOR_MAX_C`` channels), so that its products read them
    without a copy; otherwise ``W`` itself. For weights that stay constant (BatchNorm
    folded in by :mod:`singa.model.inference`, ONNX initializers in ``sonnx.prepare``):
    a batch-1 ResNet-20 inference copied about 1 MB of filters per call before."""
    if groups != 1 or W.ndim != 4 or W.shape[1] <= _KMAJOR_MAX_C:
        return W
    return array_module(W).ascontiguousarray(W.transpose(2, 3, 1, 0)).transpose(3, 2, 0, 1)


def _accumulate(total: Any, part: Any) -> Any:
    """``total + part``, into ``total`` (a fresh array of the caller's) when there is one."""
    if total is None:
        return part
    total += part
    return total


def _sum_in_order(parts: list) -> Any:
    """The sum of the partial results ``parts`` (fresh arrays), added in order."""
    total = parts[0]
    for p in parts[1:]:
        total += p
    return total


def _column_chunks(xp: Any, xh: Any, geo: tuple, pads: tuple, slices: list) -> Iterator[tuple[int, int, Any]]:
    """Yield ``(i0, i1, cols)`` for each batch slice ``(i0, i1)`` of ``slices``: the
    columns (rows (i1-i0)*OH*OW, kh*kw*C) of the windows of samples ``i0:i1`` of ``xh``
    (N, H, W, C, any strides) zero-padded by ``pads`` (top, left, bottom, right).
    Each slice is padded into a small reused buffer, so no padded copy of the whole
    input is made (the cached padded inputs were most of a ResNet's peak memory above
    its activations). The columns live in one reused buffer: use each before taking
    the next."""
    kh, kw, _, _, _, _, oh, ow = geo
    h, w, c = xh.shape[1:]
    t, l, b, r = pads
    step = max(i1 - i0 for i0, i1 in slices)
    buf = scratch(xp, (step, oh, ow, 1, kh, kw, c), xh.dtype)
    padded = None if t == l == b == r == 0 else scratch(xp, (step, h + t + b, w + l + r, c), xh.dtype)
    if padded is not None:
        im.zero_border(padded, h, w, pads)  # once: each slice overwrites only the middle
    for i0, i1 in slices:
        src = xh[i0:i1]
        if padded is not None:
            src = im.pad_nhwc_into(padded[: i1 - i0], src, pads, border=False)
        cb = buf[: i1 - i0]
        xp.copyto(cb, im.windows(xp, src, *geo))
        yield i0, i1, cb.reshape((i1 - i0) * oh * ow, kh * kw * c)


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
