"""Transposed convolution: :func:`conv_transpose2d` and :func:`conv_transpose3d` (ONNX
ConvTranspose, PyTorch's ``conv_transpose2d/3d``): the gradient of a convolution with
respect to its input, used as a forward operator (decoders, upsampling).

Computed as one matrix product per group, x (N*S, Ci/g) @ W (Ci/g, Co/g*K) where S
and K are the products of the spatial and kernel sizes, followed by K strided
additions into the (uncropped) output (col2im); the backward pass is the matching
strided gather (im2col) and two products. The same code serves 2-D and 3-D.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import singa.kernels.conv_geometry as geo
from singa.autograd.engine import Operation
from singa.device import array_module
from singa.tensor import Tensor

__all__ = ["conv_transpose2d", "conv_transpose3d"]


class _ConvTranspose(Operation):
    """y = conv_transpose(x, W) + b on (N, C, D1, ..., Dn) arrays, n = len(kernel_size).

    Attributes (read by graph replay and the ONNX exporter), one entry per spatial axis:
        kernel_size, stride, dilation, output_padding: tuples of ints (output_padding:
            extra cells at the end of each axis).
        pads: (begin_1, ..., begin_n, end_1, ..., end_n) cropped from the full output
            (ONNX order; negative values add zeros).
        groups: number of groups.
        bias: whether a bias is the third input.
    """

    def __init__(
        self,
        kernel_size: tuple,
        stride: tuple,
        pads: tuple,
        output_padding: tuple,
        dilation: tuple,
        groups: int = 1,
        bias: bool = False,
    ):
        super().__init__()
        self.kernel_size = tuple(kernel_size)
        self.stride = tuple(stride)
        self.pads = tuple(pads)
        self.output_padding = tuple(output_padding)
        self.dilation = tuple(dilation)
        self.groups = int(groups)
        self.bias = bias

    def full_size(self, *sizes: int) -> tuple:
        """The output's spatial sizes before cropping ``pads``."""
        return tuple(
            (n - 1) * s + (k - 1) * d + 1 + op
            for n, k, s, d, op in zip(
                sizes, self.kernel_size, self.stride, self.dilation, self.output_padding
            )
        )

    def _taps(self, sizes: tuple) -> list:
        """(kernel offset, output slices) for every cell of the kernel, row-major."""
        res = []
        for js in itertools.product(*(range(k) for k in self.kernel_size)):
            sl = tuple(
                slice(j * d, j * d + s * (n - 1) + 1, s)
                for j, d, s, n in zip(js, self.dilation, self.stride, sizes)
            )
            res.append((js, (slice(None), slice(None)) + sl))
        return res

    def forward(self, x, W, b=None):
        xp = array_module(x)
        nd = len(self.kernel_size)
        n, ci = x.shape[:2]
        sizes = x.shape[2:]
        g = self.groups
        cig, cog = ci // g, W.shape[1]
        ks = math.prod(self.kernel_size)
        full_sizes = self.full_size(*sizes)
        sp = tuple(range(2, nd + 2))
        # cols (N, G*Co/g, k1..kn, S1..Sn)
        xr = x.transpose(0, *sp, 1).reshape(-1, g, cig)
        wr = W.reshape(g, cig, cog * ks)
        cols = xp.matmul(xr.transpose(1, 0, 2), wr)  # (G, N*S, Co/g*K)
        cols = cols.reshape((g, n) + sizes + (cog,) + self.kernel_size)
        kax = tuple(range(nd + 3, 2 * nd + 3))
        cols = cols.transpose(1, 0, nd + 2, *kax, *sp).reshape((n, g * cog) + self.kernel_size + sizes)
        full = xp.zeros((n, g * cog) + full_sizes, dtype=cols.dtype)
        for js, sl in self._taps(sizes):
            full[sl] += cols[(slice(None), slice(None)) + js]
        y = self._crop(xp, full)
        if b is not None:
            y += b.astype(y.dtype, copy=False).reshape((1, -1) + (1,) * nd)
        if self.requires_grad:
            self.cache = (
                x if self.needs_grad[1] else None,
                W if self.needs_grad[0] else None,
                x.shape,
                W.shape,
            )
        return y

    def _crop(self, xp: Any, full: Any) -> Any:
        nd = len(self.kernel_size)
        begin, end = self.pads[:nd], self.pads[nd:]
        if min(self.pads) < 0:  # negative pads grow the output with zeros
            shape = full.shape[:2] + tuple(
                f + max(-b, 0) + max(-e, 0) for f, b, e in zip(full.shape[2:], begin, end)
            )
            grown = xp.zeros(shape, full.dtype)
            grown[
                (slice(None), slice(None))
                + tuple(slice(max(-b, 0), max(-b, 0) + f) for f, b in zip(full.shape[2:], begin))
            ] = full
            full = grown
            begin, end = tuple(max(b, 0) for b in begin), tuple(max(e, 0) for e in end)
        sl = tuple(slice(b, f - e) for f, b, e in zip(full.shape[2:], begin, end))
        return xp.ascontiguousarray(full[(slice(None), slice(None)) + sl])

    def _uncrop(self, xp: Any, dy: Any, full_sizes: tuple) -> Any:
        nd = len(self.kernel_size)
        begin = self.pads[:nd]
        full = xp.zeros(dy.shape[:2] + tuple(full_sizes), dtype=dy.dtype)
        src = dy[(slice(None), slice(None)) + tuple(slice(max(-b, 0), None) for b in begin)]
        keep = [min(s, f - max(b, 0)) for s, f, b in zip(src.shape[2:], full_sizes, begin)]
        dst = tuple(slice(max(b, 0), max(b, 0) + m) for b, m in zip(begin, keep))
        full[(slice(None), slice(None)) + dst] = src[
            (slice(None), slice(None)) + tuple(slice(0, m) for m in keep)
        ]
        return full

    def backward(self, dy):
        xp = array_module(dy)
        x, W, xshape, wshape = self.cache
        nd = len(self.kernel_size)
        n, ci = xshape[:2]
        sizes = tuple(xshape[2:])
        g = self.groups
        cig, cog = ci // g, wshape[1]
        ks = math.prod(self.kernel_size)
        full = self._uncrop(xp, dy, self.full_size(*sizes))
        # dcols (N, G*Co/g, k1..kn, S1..Sn) -> (G, N*S, Co/g*K)
        dcols = xp.empty((n, g * cog) + self.kernel_size + sizes, dtype=dy.dtype)
        for js, sl in self._taps(sizes):
            dcols[(slice(None), slice(None)) + js] = full[sl]
        kax = tuple(range(3, nd + 3))
        sax = tuple(range(nd + 3, 2 * nd + 3))
        dc = dcols.reshape((n, g, cog) + self.kernel_size + sizes).transpose(1, 0, *sax, 2, *kax)
        dc = dc.reshape(g, n * math.prod(sizes), cog * ks)
        dx = dW = db = None
        sp = tuple(range(2, nd + 2))
        if self.needs_grad[0]:
            wr = W.reshape(g, cig, cog * ks)
            dxr = xp.matmul(dc, wr.transpose(0, 2, 1))  # (G, N*S, Ci/g)
            dx = dxr.transpose(1, 0, 2).reshape((n,) + sizes + (ci,)).transpose(0, nd + 1, *range(1, nd + 1))
            dx = xp.ascontiguousarray(dx)
        if self.needs_grad[1]:
            xr = x.transpose(0, *sp, 1).reshape(-1, g, cig).transpose(1, 2, 0)  # (G, Ci/g, N*S)
            dW = xp.matmul(xr, dc).reshape(wshape)
        if self.bias and self.needs_grad[2]:
            db = dy.sum(axis=(0,) + sp)
        if self.bias:
            return dx, dW, db
        return dx, dW


class ConvTranspose2d(_ConvTranspose):
    """y = conv_transpose2d(x, W) + b on NCHW arrays; attributes as :class:`_ConvTranspose`
    with two spatial axes (pads: top, left, bottom, right)."""

    def __init__(
        self,
        kernel_size: tuple[int, int],
        stride: tuple[int, int] = (1, 1),
        pads: tuple[int, int, int, int] = (0, 0, 0, 0),
        output_padding: tuple[int, int] = (0, 0),
        dilation: tuple[int, int] = (1, 1),
        groups: int = 1,
        bias: bool = False,
    ):
        super().__init__(kernel_size, stride, pads, output_padding, dilation, groups, bias)


class ConvTranspose3d(_ConvTranspose):
    """y = conv_transpose3d(x, W) + b on NCDHW arrays; attributes as :class:`_ConvTranspose`
    with three spatial axes."""

    def __init__(
        self,
        kernel_size: tuple[int, int, int],
        stride: tuple[int, int, int] = (1, 1, 1),
        pads: tuple[int, ...] = (0,) * 6,
        output_padding: tuple[int, int, int] = (0, 0, 0),
        dilation: tuple[int, int, int] = (1, 1, 1),
        groups: int = 1,
        bias: bool = False,
    ):
        super().__init__(kernel_size, stride, pads, output_padding, dilation, groups, bias)


def _build(
    name: str, cls: type, nd: int, x: Tensor, W: Tensor, b, stride, padding, output_padding, dilation, groups
):
    """Validate the arguments of an ``nd``-D transposed convolution and run it."""
    if x.ndim() != nd + 2 or W.ndim() != nd + 2:
        axes = ", ".join(f"k{i + 1}" for i in range(nd))
        raise ValueError(
            f"{name}: x must have {nd} spatial axes (N, C, ...) and W (C, O/groups, {axes}), "
            f"got {x.shape} and {W.shape}"
        )
    groups = int(groups)
    stride_ = geo.ints(stride, nd, "stride", name)
    dilation_ = geo.ints(dilation, nd, "dilation", name)
    outpad = geo.ints(output_padding, nd, "output_padding", name, minimum=0)
    pads = geo.pads(padding, nd, name, allow_negative=True)
    ci, wc, cog = x.shape[1], W.shape[0], W.shape[1]
    if groups < 1 or ci != wc or ci % groups:
        raise ValueError(
            f"{name}: x of shape {x.shape} and W of shape {W.shape} do not match "
            f"with groups={groups} "
            "(need C == W.shape[0] and C % groups == 0)"
        )
    if b is not None and tuple(b.shape) != (cog * groups,):
        raise ValueError(f"{name}: bias of shape {b.shape} does not match {cog * groups} output channels")
    op = cls(tuple(W.shape[2:]), stride_, pads, outpad, dilation_, groups, bias=b is not None)
    full = op.full_size(*x.shape[2:])
    if any(f - pads[i] - pads[i + nd] <= 0 for i, f in enumerate(full)):
        raise ValueError(
            f"{name}: output would be empty for x of shape {x.shape}, W of shape {W.shape}, pads {pads}"
        )
    return (op(x, W) if b is None else op(x, W, b))[0]


def conv_transpose2d(
    x: Tensor,
    W: Tensor,
    b: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """2-D transposed convolution of NCHW ``x`` with filters ``W`` (ONNX ConvTranspose).

    Args:
        x: input of shape (N, Ci, H, W).
        W: filters of shape (Ci, Co/groups, kh, kw).
        b: bias of shape (Co,), or None.
        stride, dilation: int or pair.
        padding: int, (ph, pw) or (top, left, bottom, right): cells cropped from the
            full output (negative values add zeros).
        output_padding: int or pair: extra cells at the bottom/right of the output
            (each smaller than its stride or dilation).
        groups: channel groups.

    Returns:
        y of shape (N, Co, OH, OW), OH = (H - 1)*sh + (kh - 1)*dh + 1 + oph - top - bottom.
    """
    return _build(
        "conv_transpose2d", ConvTranspose2d, 2, x, W, b, stride, padding, output_padding, dilation, groups
    )


def conv_transpose3d(
    x: Tensor,
    W: Tensor,
    b: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """3-D transposed convolution of NCDHW ``x`` with filters ``W`` (ONNX ConvTranspose).

    Args:
        x: input of shape (N, Ci, D, H, W).
        W: filters of shape (Ci, Co/groups, kd, kh, kw).
        b: bias of shape (Co,), or None.
        stride, dilation, output_padding: int or 3 ints (output_padding: extra cells
            at the end of each axis).
        padding: int, 3 ints (both sides) or 6 ints in ONNX ``pads`` order
            (d_begin, h_begin, w_begin, d_end, h_end, w_end): cells cropped from the
            full output (negative values add zeros).
        groups: channel groups.

    Returns:
        y of shape (N, Co, OD, OH, OW), OD = (D - 1)*sd + (kd - 1)*dd + 1 + opd - begin - end.
    """
    return _build(
        "conv_transpose3d", ConvTranspose3d, 3, x, W, b, stride, padding, output_padding, dilation, groups
    )
