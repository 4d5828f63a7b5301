"""Transposed convolution: :func:`conv_transpose2d` (ONNX ConvTranspose, PyTorch's
``conv_transpose2d``): the gradient of :func:`~singa.autograd.conv.conv2d` with
respect to its input, used as a forward operator (decoders, upsampling).

Computed as one matrix product per group, x (N*H*W, Ci/g) @ W (Ci/g, Co/g*kh*kw),
followed by kh*kw strided additions into the (uncropped) output (col2im); the
backward pass is the matching strided gather (im2col) and two products.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.autograd.engine import Operation, array_module
from singa.tensor import Tensor

__all__ = ["conv_transpose2d"]


def _pair(v: Any, name: str, minimum: int) -> tuple[int, int]:
    t = (int(v), int(v)) if isinstance(v, int | np.integer) else tuple(int(a) for a in v)
    if len(t) != 2 or min(t) < minimum:
        raise ValueError(f"conv_transpose2d: {name} must be an int or a pair of ints >= {minimum}, got {v!r}")
    return t


class ConvTranspose2d(Operation):
    """y = conv_transpose2d(x, W) + b on NCHW arrays.

    Attributes (read by graph replay and the ONNX exporter):
        kernel_size: (kh, kw).
        stride: (sh, sw).
        pads: (top, left, bottom, right) cropped from the full output (ONNX order).
        output_padding: (oph, opw) extra rows/columns at the bottom/right.
        dilation: (dh, dw).
        groups: number of groups.
        bias: whether a bias is the third input.
    """

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
        super().__init__()
        self.kernel_size = tuple(kernel_size)
        self.stride = tuple(stride)
        self.pads = tuple(pads)
        self.output_padding = tuple(output_padding)
        self.dilation = tuple(dilation)
        self.groups = int(groups)
        self.bias = bias

    def full_size(self, h: int, w: int) -> tuple[int, int]:
        """The output size before cropping ``pads``."""
        (kh, kw), (sh, sw), (dh, dw), (oph, opw) = (
            self.kernel_size,
            self.stride,
            self.dilation,
            self.output_padding,
        )
        return (h - 1) * sh + (kh - 1) * dh + 1 + oph, (w - 1) * sw + (kw - 1) * dw + 1 + opw

    def _taps(self, h: int, w: int) -> list:
        (kh, kw), (sh, sw), (dh, dw) = self.kernel_size, self.stride, self.dilation
        return [
            (i, j, slice(i * dh, i * dh + sh * (h - 1) + 1, sh), slice(j * dw, j * dw + sw * (w - 1) + 1, sw))
            for i in range(kh)
            for j in range(kw)
        ]

    def forward(self, x, W, b=None):
        xp = array_module(x)
        n, ci, h, w = x.shape
        g = self.groups
        cig, cog = ci // g, W.shape[1]
        kh, kw = self.kernel_size
        hf, wf = self.full_size(h, w)
        # cols (N*H*W, G, Co/g, kh, kw)
        xr = x.transpose(0, 2, 3, 1).reshape(n * h * w, g, cig)
        wr = W.reshape(g, cig, cog * kh * kw)
        cols = xp.matmul(xr.transpose(1, 0, 2), wr)  # (G, NHW, Co/g*kh*kw)
        cols = cols.reshape(g, n, h, w, cog, kh, kw).transpose(1, 0, 4, 5, 6, 2, 3)
        cols = cols.reshape(n, g * cog, kh, kw, h, w)
        full = xp.zeros((n, g * cog, hf, wf), dtype=cols.dtype)
        for i, j, hs, ws in self._taps(h, w):
            full[:, :, hs, ws] += cols[:, :, i, j]
        y = self._crop(xp, full)
        if b is not None:
            y += b.astype(y.dtype, copy=False).reshape(1, -1, 1, 1)
        if self.requires_grad:
            self.cache = (
                x if self.needs_grad[1] else None,
                W if self.needs_grad[0] else None,
                x.shape,
                W.shape,
            )
        return y

    def _crop(self, xp: Any, full: Any) -> Any:
        t, l, bt, r = self.pads
        hf, wf = full.shape[2:]
        if min(self.pads) < 0:  # negative pads grow the output with zeros
            grown = xp.zeros(
                full.shape[:2] + (hf + max(-t, 0) + max(-bt, 0), wf + max(-l, 0) + max(-r, 0)), full.dtype
            )
            grown[:, :, max(-t, 0) : max(-t, 0) + hf, max(-l, 0) : max(-l, 0) + wf] = full
            full = grown
            t, l, bt, r = max(t, 0), max(l, 0), max(bt, 0), max(r, 0)
            hf, wf = full.shape[2:]
        return xp.ascontiguousarray(full[:, :, t : hf - bt, l : wf - r])

    def _uncrop(self, xp: Any, dy: Any, hf: int, wf: int) -> Any:
        t, l, _, _ = self.pads
        full = xp.zeros(dy.shape[:2] + (hf, wf), dtype=dy.dtype)
        ht, wt = max(t, 0), max(l, 0)
        src = dy[:, :, max(-t, 0) :, max(-l, 0) :]
        hh, ww = min(src.shape[2], hf - ht), min(src.shape[3], wf - wt)
        full[:, :, ht : ht + hh, wt : wt + ww] = src[:, :, :hh, :ww]
        return full

    def backward(self, dy):
        xp = array_module(dy)
        x, W, xshape, wshape = self.cache
        n, ci, h, w = xshape
        g = self.groups
        cig, cog = ci // g, wshape[1]
        kh, kw = self.kernel_size
        hf, wf = self.full_size(h, w)
        full = self._uncrop(xp, dy, hf, wf)
        # dcols (N, G*Co/g, kh, kw, H, W) -> (G, NHW, Co/g*kh*kw)
        dcols = xp.empty((n, g * cog, kh, kw, h, w), dtype=dy.dtype)
        for i, j, hs, ws in self._taps(h, w):
            dcols[:, :, i, j] = full[:, :, hs, ws]
        dc = dcols.reshape(n, g, cog, kh, kw, h, w).transpose(1, 0, 5, 6, 2, 3, 4).reshape(g, n * h * w, -1)
        dx = dW = db = None
        if self.needs_grad[0]:
            wr = W.reshape(g, cig, cog * kh * kw)
            dxr = xp.matmul(dc, wr.transpose(0, 2, 1))  # (G, NHW, Ci/g)
            dx = dxr.transpose(1, 0, 2).reshape(n, h, w, ci).transpose(0, 3, 1, 2)
            dx = xp.ascontiguousarray(dx)
        if self.needs_grad[1]:
            xr = x.transpose(0, 2, 3, 1).reshape(n * h * w, g, cig).transpose(1, 2, 0)  # (G, Ci/g, NHW)
            dW = xp.matmul(xr, dc).reshape(wshape)
        if self.bias and self.needs_grad[2]:
            db = dy.sum(axis=(0, 2, 3))
        if self.bias:
            return dx, dW, db
        return dx, dW


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
    if x.ndim() != 4 or W.ndim() != 4:
        raise ValueError(
            "conv_transpose2d: x must be (N, C, H, W) and W (C, O/groups, kh, kw), "
            f"got {x.shape} and {W.shape}"
        )
    groups = int(groups)
    stride_ = _pair(stride, "stride", 1)
    dilation_ = _pair(dilation, "dilation", 1)
    outpad = _pair(output_padding, "output_padding", 0)
    if isinstance(padding, int | np.integer):
        pads = (int(padding),) * 4
    else:
        p = tuple(int(a) for a in padding)
        if len(p) not in (2, 4):
            raise ValueError(f"conv_transpose2d: padding must be an int, a pair or 4 ints, got {padding!r}")
        pads = (p[0], p[1], p[0], p[1]) if len(p) == 2 else p
    n, ci, h, w = x.shape
    wc, cog, kh, kw = W.shape
    if groups < 1 or ci != wc or ci % groups:
        raise ValueError(
            f"conv_transpose2d: x of shape {x.shape} and W of shape {W.shape} do not match "
            f"with groups={groups} "
            "(need C == W.shape[0] and C % groups == 0)"
        )
    if b is not None and tuple(b.shape) != (cog * groups,):
        raise ValueError(
            f"conv_transpose2d: bias of shape {b.shape} does not match {cog * groups} output channels"
        )
    op = ConvTranspose2d((kh, kw), stride_, pads, outpad, dilation_, groups, bias=b is not None)
    hf, wf = op.full_size(h, w)
    if hf - pads[0] - pads[2] <= 0 or wf - pads[1] - pads[3] <= 0:
        raise ValueError(
            f"conv_transpose2d: output would be empty for x of shape {x.shape}, W of shape {W.shape}, "
            f"pads {pads}"
        )
    return (op(x, W) if b is None else op(x, W, b))[0]
