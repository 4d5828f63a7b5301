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
makes and multiplies its columns a few samples at a time (about 8 MB each,
:mod:`singa.kernels.conv_slices`), so the copy and the product meet in the cache and
only the input is kept for backward (not the kh*kw times larger columns).

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
workers (:mod:`singa.kernels.conv_slices`). Grouped convolutions copy their columns
in batch slices too (``im2col.split_batch``). The forward kernels are in
:mod:`singa.kernels.conv_forward`; this operator adds the backward.
"""

from __future__ import annotations

from typing import Any

from singa.autograd.engine import Operation, check_same_dtype
from singa.device import array_module
from singa.kernels import conv_depthwise as depthwise
from singa.kernels import conv_forward
from singa.kernels import conv_geometry as geo
from singa.kernels import conv_slices as sl
from singa.kernels import conv_winograd_grad as winograd_grad
from singa.kernels import im2col as im
from singa.kernels.buffers import scratch
from singa.tensor import Tensor

__all__ = ["conv2d"]


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

    def geometry(self) -> dict:
        """The keyword arguments of :mod:`singa.kernels.conv_forward` for this
        convolution: ``kernel_size``, ``stride``, ``pads``, ``dilation`` and ``groups``."""
        return dict(
            kernel_size=self.kernel_size,
            stride=self.stride,
            pads=self.pads,
            dilation=self.dilation,
            groups=self.groups,
        )

    def forward(self, x, W, b=None):
        """y (N, O, OH, OW), NCHW with NHWC memory (:func:`singa.kernels.conv_forward.forward_saving`)."""
        keep = (self.needs_grad[0], self.needs_grad[1]) if self.requires_grad else None
        y, saved = conv_forward.forward_saving(x, W, b, keep=keep, **self.geometry())
        if self.requires_grad:
            self.cache = saved
        return y

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
        (kh*kw*O, C) gives dx, and the slice transposed times the input's pixels (N*H*W, C) gives
        dW with flipped offsets. One long product each instead of kh*kw short ones plus
        a col2im, and no second set of columns for dW. dx is NCHW with NHWC memory. The
        slices run on the workers; their dW partials are added in slice order."""
        n, c, h, w = x_shape
        o, oh, ow = dy.shape[1:]
        (kh, kw), (dh, dw), (t, l, _, _) = self.kernel_size, self.dilation, self.pads
        pt, pl = dh * (kh - 1) - t, dw * (kw - 1) - l
        pads = (pt, pl, h + dh * (kh - 1) - pt - oh, w + dw * (kw - 1) - pl - ow)
        wf = sl.laid_out(xp, W[:, :, ::-1, ::-1].transpose(2, 3, 0, 1), (kh * kw * o, c))
        dxh = scratch(xp, (n, h, w, c), dy.dtype)
        dx2, rows = dxh.reshape(n * h * w, c), h * w
        xh = None if x is None else x.transpose(0, 2, 3, 1)
        dyh = dy.transpose(0, 2, 3, 1)

        def piece(slices):
            part = None
            for i0, i1, cb in sl.column_chunks(xp, dyh, (kh, kw, 1, 1, dh, dw, h, w), pads, slices):
                xp.matmul(cb, wf, out=dx2[i0 * rows : i1 * rows])
                if xh is not None:  # a free view of x when its memory is NHWC
                    part = sl.add_product(xp, part, cb.T, xh[i0:i1].reshape((i1 - i0) * rows, c))
            return part

        slices = sl.batch_slices(xp, n, rows * kh * kw * o * dy.itemsize, min(c, o))
        parts = sl.run_slices(xp, piece, slices, n * rows * kh * kw * o * c, c * kh * kw * o * dy.itemsize)
        dW = None
        if xh is not None:  # g[i', j', o, c] = dW[o, c, kh-1-i', kw-1-j']
            # (kh*kw*O, C) rather than (C, kh*kw*O): the copy to dW then reads kh*kw
            # streams in order (512 x 512 3x3 filters: 1.5 ms against 11 from (C, kh*kw*O))
            g = sl.sum_in_order(parts)
            dW = scratch(xp, (o, c, kh, kw), dy.dtype)
            xp.copyto(dW, g.reshape(kh, kw, o, c)[::-1, ::-1].transpose(2, 3, 0, 1))
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
        wb = None if W is None else sl.laid_out(xp, W.transpose(2, 3, 0, 1), (kh * kw, o, c))
        dxh = None if W is None else scratch(xp, (n, h + t + b, w + l + r, c), dyh.dtype)
        slices = sl.batch_slices(xp, n, rows * kk * dyh.itemsize, o)
        most = max(i1 - i0 for i0, i1 in slices) * rows * kk

        def piece(part_slices):
            part = None
            if xh is not None:
                for i0, i1, cb in sl.column_chunks(xp, xh, geo, self.pads, part_slices):
                    part = sl.accumulate(part, dyh[i0 * rows : i1 * rows].T @ cb)
            if dxh is not None:
                buf = scratch(xp, (most,), dyh.dtype)
                for i0, i1 in part_slices:
                    dcols = buf[: (i1 - i0) * rows * kk].reshape(kh * kw, (i1 - i0) * rows, c)
                    xp.matmul(dyh[None, i0 * rows : i1 * rows], wb, out=dcols)
                    dxh[i0:i1] = 0
                    im.col2im_offsets(dcols.reshape(kh, kw, i1 - i0, oh, ow, c), dxh[i0:i1], *geo)
            return part

        parts = sl.run_slices(
            xp, piece, slices, n * rows * kk * o, 0 if xh is None else o * kk * dyh.itemsize
        )
        dW = None if xh is None else sl.sum_in_order(parts).reshape(o, kh, kw, c).transpose(0, 3, 1, 2)
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
        slices = sl.batch_slices(xp, n, (kk + 1) * rows * dyh.itemsize, dyh.shape[1])
        most = max(i1 - i0 for i0, i1 in slices) * rows * kk

        def piece(part_slices):
            part = None
            buf = None if dxp is None else scratch(xp, (most,), dyh.dtype)
            for i0, i1 in part_slices:
                d = dyh[i0 * rows : i1 * rows]
                if cols is not None:
                    part = sl.accumulate(part, cols[:, i0 * rows : i1 * rows] @ d)
                if buf is not None:
                    dcols = buf[: kk * len(d)].reshape(kk, len(d))
                    xp.matmul(wk[:, :kk].T, d.T, out=dcols)
                    dxp[i0:i1] = 0
                    im.col2im_kmajor(dcols.reshape(c, kh, kw, i1 - i0, oh, ow), dxp[i0:i1], *geo)
            return part

        partial = 0 if cols is None else cols.shape[0] * dyh.shape[1] * dyh.itemsize
        parts = sl.run_slices(xp, piece, slices, dyh.size * (kk + 1), partial)
        dx = None if dxp is None else dxp[:, :, t : t + h, l : l + w]
        return dx, None if cols is None else sl.sum_in_order(parts)

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
        elif not kmajor and winograd_grad.applies(dy, x_shape, w_shape, self.geometry()):
            dx, dW = winograd_grad.backward(dy, cols, wk, self.pads)
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
