"""Pooling: max and average pooling over 2-D (and 1-D) windows, global average pooling.
N-D and dilated pooling and max-pooling indices: :mod:`singa.autograd.pooling_nd`.

Windows are handled as kh*kw strided views of the (padded) input, combined with
``xp.maximum`` / ``xp.add`` (much faster than reshaping into windows and reducing:
``bench/README.md``, "Design measurements"). Outputs keep the input's memory layout (NCHW or
NHWC in memory; the API is NCHW either way).

Output size (PyTorch/ONNX): OH = floor((H + top + bottom - kh) / sh) + 1, or with
``ceil_mode`` the ceiling, minus one when the last window would start beyond the
input plus its top padding. Each padding must be smaller than the kernel, so every
window holds at least one real cell.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import singa.kernels.conv_geometry as geo
import singa.kernels.im2col as im
from singa.autograd.engine import Operation
from singa.device import array_module
from singa.kernels import workers
from singa.kernels.jit import kernel
from singa.tensor import Tensor

__all__ = [
    "max_pool_2d",
    "avg_pool_2d",
    "global_avg_pool",
    "globalaveragepool",
    "max_pool_1d",
    "avg_pool_1d",
]


class _Pooling(Operation):
    """Shared geometry of the pooling operators (2-D, or 1-D on (N, C, L) inputs).

    Attributes (read by graph replay and the ONNX exporter), in the operator's own
    number of spatial dimensions (``spatial_dims`` 2 or 1):
        kernel_size: (kh, kw) or (k,).
        stride: (sh, sw) or (s,).
        pads: (top, left, bottom, right) or (begin, end): ONNX ``pads`` order.
        ceil_mode: output size rounded up.
    """

    def __init__(
        self, kernel_size: tuple, stride: tuple, pads: tuple, ceil_mode: bool = False, spatial_dims: int = 2
    ):
        super().__init__()
        self.kernel_size = tuple(kernel_size)
        self.stride = tuple(stride)
        self.pads = tuple(pads)
        self.ceil_mode = bool(ceil_mode)
        self.spatial_dims = spatial_dims
        if spatial_dims == 1:
            self._k = (1, self.kernel_size[0])
            self._s = (1, self.stride[0])
            self._p = (0, self.pads[0], 0, self.pads[1])
        else:
            self._k, self._s, self._p = self.kernel_size, self.stride, self.pads

    def _geometry(self, h: int, w: int) -> tuple:
        """(OH, OW, extra rows, extra columns) where the extras are cells beyond the
        bottom/right padding that ceil mode's last window reaches."""
        (kh, kw), (sh, sw), (t, l, b, r) = self._k, self._s, self._p
        oh = geo.out_size(h, kh, sh, t, b, ceil_mode=self.ceil_mode)
        ow = geo.out_size(w, kw, sw, l, r, ceil_mode=self.ceil_mode)
        eh = max(0, (oh - 1) * sh + kh - (h + t + b))
        ew = max(0, (ow - 1) * sw + kw - (w + l + r))
        return oh, ow, eh, ew

    def _slices(self, oh: int, ow: int) -> list:
        (kh, kw), (sh, sw) = self._k, self._s
        return [
            (slice(i, i + sh * (oh - 1) + 1, sh), slice(j, j + sw * (ow - 1) + 1, sw))
            for i in range(kh)
            for j in range(kw)
        ]

    def _disjoint(self) -> bool:
        return self._s[0] >= self._k[0] and self._s[1] >= self._k[1]

    def _to4(self, x: Any) -> Any:
        return x[:, :, None, :] if self.spatial_dims == 1 else x

    def _from4(self, y: Any) -> Any:
        return y[:, :, 0, :] if self.spatial_dims == 1 else y

    def _crop(self, dxp: Any, h: int, w: int) -> Any:
        t, l = self._p[0], self._p[1]
        if dxp.shape[2] == h and dxp.shape[3] == w:
            return dxp
        return dxp[:, :, t : t + h, l : l + w]


class MaxPool2d(_Pooling):
    """y = max over each window; padded cells never win.

    The gradient of each output goes to one cell of its window: the first maximum in
    row-major order within the window when several cells tie (as PyTorch on CPU). NaN
    inputs give NaN outputs but no gradient.

    Forward takes the maximum of each window of the padded input
    (:func:`~singa.kernels.im2col.max_of_windows`: one compiled pass on the CPU when
    the channels are contiguous in memory, kh*kw strided views otherwise); backward
    finds each window's first maximum again, in one compiled pass on the CPU
    (:func:`_max_backward`), with kh*kw views on a GPU. Both run over batch pieces on
    the worker threads.
    """

    def forward(self, x):
        xp = array_module(x)
        x4 = self._to4(x)
        n, c, h, w = x4.shape
        oh, ow, eh, ew = self._geometry(h, w)
        xpad = im.pad_nchw(x4, self._p, xp, fill=-xp.inf, extra=(eh, ew), pooled=True)
        y = im.pooled_like(x4, (n, c, oh, ow), xp)
        xh, yh = xpad.transpose(0, 2, 3, 1), y.transpose(0, 2, 3, 1)  # as (N, H, W, C)

        def part(a, b):
            im.max_of_windows(xp, xh[a:b], *self._k, *self._s, yh[a:b])

        workers.run_pieces(part, workers.work_pieces(n, xpad.size + y.size * self._k[0] * self._k[1]), xp)
        if self.requires_grad:
            self.cache = (x4.shape, xpad, y)
        return self._from4(y)

    def backward(self, dy):
        if array_module(dy) is np:
            return self._backward_cpu(dy)
        return self._backward_views(dy)

    def _backward_cpu(self, dy):
        (n, c, h, w), xpad, y = self.cache
        dy = self._to4(dy)
        nhwc = im.is_channels_last(xpad)
        dxp = im.pooled_like(xpad, xpad.shape, np, dtype=dy.dtype)
        oh, ow = y.shape[2], y.shape[3]
        cover = self._s == self._k and xpad.shape[2:] == (oh * self._k[0], ow * self._k[1])
        xk, yk, dyk = (_compute_dtype(_kernel_view(a, nhwc)) for a in (xpad, y, dy))
        dxk = _kernel_view(dxp, nhwc)  # dxp is laid out as xpad: a view, never a copy
        dxc = _compute_dtype(dxk)

        def part(a, b):
            _max_backward(xk[a:b], yk[a:b], dyk[a:b], dxc[a:b], *self._k, *self._s, cover)

        workers.run_pieces(part, workers.work_pieces(len(dxk), dxk.size + yk.size * 3))
        if dxc is not dxk:
            dxk[...] = dxc
        return self._from4(self._crop(dxp, h, w))

    def _backward_views(self, dy):
        (n, c, h, w), xpad, y = self.cache
        xp = array_module(dy)
        dy = self._to4(dy)
        oh, ow = y.shape[2], y.shape[3]
        slices = self._slices(oh, ow)
        disjoint = self._disjoint()
        covered = disjoint and self._s == self._k and xpad.shape[2:] == (oh * self._k[0], ow * self._k[1])
        dxp = im.pooled_like(xpad, xpad.shape, xp, dtype=dy.dtype)
        last = len(slices) - 1

        def part(a, b):
            xs, ys, d, g = xpad[a:b], y[a:b], dxp[a:b], dy[a:b]
            if not covered:
                d[...] = 0
            # found: windows whose maximum already took the gradient (first one wins)
            found = im.pooled_like(ys, ys.shape, xp, dtype=bool)
            m = im.pooled_like(ys, ys.shape, xp, dtype=bool) if last else found
            tmp = None if disjoint else im.pooled_like(ys, ys.shape, xp, dtype=g.dtype)
            for k, (hs, ws) in enumerate(slices):
                if k == 0:
                    xp.equal(xs[:, :, hs, ws], ys, out=found)
                    mk = found
                else:
                    xp.equal(xs[:, :, hs, ws], ys, out=m)
                    xp.greater(m, found, out=m)  # m and not found
                    mk = m
                    if k < last:
                        xp.logical_or(found, m, out=found)
                if disjoint:
                    xp.multiply(g, mk, out=d[:, :, hs, ws])
                else:
                    d[:, :, hs, ws] += xp.multiply(g, mk, out=tmp)

        im.split_batch(xp, part, n, dxp.size + y.size * len(slices) * 2)
        return self._from4(self._crop(dxp, h, w))


# ----- the CPU max-pooling backward (numba) ------------------------------------------------
# One pass writing dx (the window's dy at its first maximum, 0 elsewhere) instead of kh*kw
# passes of compare, mask, "and not found yet" and multiply over views, each with its
# temporaries: 6-17x less CPU time on the MNIST CNN's pools (2x2 windows on 64x32x24x24
# and 64x64x8x8 NHWC arrays, one thread), where max-pool backward was 19% of a step.
# The arrays come in memory order (N, H, W, C): an NHWC array as such, NCHW memory as
# (N*C, H, W, 1); the inner loop over C is what the compiler vectorises.
@kernel
def _max_backward(x, y, dy, dx, kh, kw, sh, sw, cover):  # pragma: no cover (compiled)
    # x: the padded input; cover: the windows tile x exactly (stride = kernel), so every
    # cell of dx is written once and needs no zeroing first
    if not cover:
        dx[...] = 0
    found = np.empty(y.shape[3], np.bool_)
    for n in range(dy.shape[0]):
        for i in range(dy.shape[1]):
            for j in range(dy.shape[2]):
                yv, g = y[n, i, j], dy[n, i, j]
                for c in range(yv.shape[0]):
                    found[c] = yv[c] != yv[c]  # a NaN maximum sends no gradient
                for a in range(kh):
                    for b in range(kw):
                        xv, dv = x[n, i * sh + a, j * sw + b], dx[n, i * sh + a, j * sw + b]
                        for c in range(yv.shape[0]):
                            hit = (xv[c] == yv[c]) & ~found[c]
                            found[c] |= hit
                            if cover:
                                dv[c] = g[c] if hit else 0
                            elif hit:
                                dv[c] += g[c]


def _kernel_view(a: Any, nhwc: bool) -> Any:
    """A 4-D array in memory order, as the kernel takes it: (N, H, W, C) for NHWC
    memory, else the NCHW array (copied if not contiguous) as (N*C, H, W, 1). An
    array of the other layout (a gradient from ``Flatten``'s backward is NCHW when the
    input is NHWC) is copied into this one: the kernel read a strided gradient 8x
    slower than the copy and a contiguous read take together (the MNIST CNN's second
    pool, (64, 64, 8, 8): 1.52 -> 0.20 ms)."""
    if nhwc:
        return np.ascontiguousarray(a.transpose(0, 2, 3, 1))
    n, c, h, w = a.shape
    return np.ascontiguousarray(a).reshape(n * c, h, w, 1)


def _compute_dtype(a: Any) -> Any:
    """``a``, or a float32 copy of a float16 array (numba has no float16 on the CPU;
    comparisons and copies of float16 values are exact in float32)."""
    return a.astype(np.float32) if a.dtype == np.float16 else a


class AvgPool2d(_Pooling):
    """y = mean over each window.

    ``count_include_pad``: divide by the window size including padded cells (but,
    as in PyTorch, never counting the cells beyond the padding that ceil mode's last
    window reaches); otherwise divide by the number of real input cells.
    """

    def __init__(
        self,
        kernel_size: tuple,
        stride: tuple,
        pads: tuple,
        ceil_mode: bool = False,
        count_include_pad: bool = False,
        spatial_dims: int = 2,
    ):
        super().__init__(kernel_size, stride, pads, ceil_mode, spatial_dims)
        self.count_include_pad = bool(count_include_pad)

    def _scale(self, xp: Any, h: int, w: int, oh: int, ow: int, dtype: Any) -> Any:
        """1 / divisor: a Python float when all windows share it, else an (OH, OW) array."""
        (kh, kw), (sh, sw), (t, l, b, r) = self._k, self._s, self._p
        if self.count_include_pad:
            lo_h, hi_h, lo_w, hi_w = -t, h + b, -l, w + r
        else:
            lo_h, hi_h, lo_w, hi_w = 0, h, 0, w
        rows = [min(o * sh - t + kh, hi_h) - max(o * sh - t, lo_h) for o in range(oh)]
        cols = [min(o * sw - l + kw, hi_w) - max(o * sw - l, lo_w) for o in range(ow)]
        if len(set(rows)) == 1 and len(set(cols)) == 1:
            return 1.0 / (rows[0] * cols[0])
        rc = xp.asarray(rows, dtype=dtype).reshape(-1, 1)
        cc = xp.asarray(cols, dtype=dtype).reshape(1, -1)
        return 1 / (rc * cc)

    def forward(self, x):
        xp = array_module(x)
        x4 = self._to4(x)
        n, c, h, w = x4.shape
        oh, ow, eh, ew = self._geometry(h, w)
        xpad = im.pad_nchw(x4, self._p, xp, fill=0, extra=(eh, ew), pooled=True)
        slices = self._slices(oh, ow)
        scale = self._scale(xp, h, w, oh, ow, x.dtype)
        y = im.pooled_like(x4, (n, c, oh, ow), xp)

        def part(a, b):
            xs, ys = xpad[a:b], y[a:b]
            views = [xs[:, :, hs, ws] for hs, ws in slices]
            if len(views) == 1:
                xp.multiply(views[0], scale, out=ys)
                return
            xp.add(views[0], views[1], out=ys)
            for v in views[2:]:
                ys += v
            ys *= scale

        im.split_batch(xp, part, n, xpad.size + y.size * len(slices))
        if self.requires_grad:
            self.cache = (x4.shape, xpad.shape, im.is_channels_last(x4))
        return self._from4(y)

    def backward(self, dy):
        (n, c, h, w), pshape, nhwc = self.cache
        xp = array_module(dy)
        dy = self._to4(dy)
        oh, ow = dy.shape[2], dy.shape[3]
        scale = self._scale(xp, h, w, oh, ow, dy.dtype)
        slices = self._slices(oh, ow)
        disjoint = self._disjoint()
        covered = disjoint and self._s == self._k and pshape[2:] == (oh * self._k[0], ow * self._k[1])
        dxp = im.pooled_like(dy, pshape, xp, nhwc=nhwc)

        def part(a, b):
            d = dxp[a:b]
            g = dy[a:b] * scale
            if not covered:
                d[...] = 0
            for hs, ws in slices:
                if disjoint:
                    d[:, :, hs, ws] = g
                else:
                    d[:, :, hs, ws] += g

        im.split_batch(xp, part, n, dxp.size + dy.size * len(slices))
        return self._from4(self._crop(dxp, h, w))


class GlobalAvgPool(Operation):
    """y = mean over the spatial axes, keeping them as size 1: those after the first two
    ((N, C, H, W) -> (N, C, 1, 1), any number of spatial axes), or with
    ``channels_last`` those between the first and the last ((N, H, W, C) -> (N, 1, 1, C))."""

    def __init__(self, channels_last: bool = False):
        super().__init__()
        self.channels_last = channels_last

    def forward(self, x):
        if self.requires_grad:
            self.cache = (x.shape, x.ndim == 4 and not self.channels_last and im.is_channels_last(x))
        axes = tuple(range(1, x.ndim - 1)) if self.channels_last else tuple(range(2, x.ndim))
        return x.mean(axis=axes, keepdims=True)

    def backward(self, dy):
        shape, nhwc = self.cache
        xp = array_module(dy)
        dx = im.alloc_nhwc(xp, shape, dy.dtype) if nhwc else xp.empty(shape, dtype=dy.dtype)
        spatial = shape[1:-1] if self.channels_last else shape[2:]
        dx[...] = dy * (1.0 / math.prod(spatial))
        return dx


def _pool_args(name: str, x: Tensor, kernel_size: Any, stride: Any, padding: Any, ceil_mode: bool) -> tuple:
    """Validate and normalise 2-D pooling arguments -> (kernel, stride, pads)."""
    if x.ndim() != 4:
        raise ValueError(f"{name}: x must be (N, C, H, W), got shape {x.shape}")
    k = geo.pair(kernel_size, "kernel_size", name)
    s = k if stride is None else geo.pair(stride, "stride", name)
    p = geo.pads4(padding, name)
    if p[0] >= k[0] or p[2] >= k[0] or p[1] >= k[1] or p[3] >= k[1]:
        raise ValueError(f"{name}: padding {p} must be smaller than the kernel {k} on each side")
    oh = geo.out_size(x.shape[2], k[0], s[0], p[0], p[2], ceil_mode=ceil_mode)
    ow = geo.out_size(x.shape[3], k[1], s[1], p[1], p[3], ceil_mode=ceil_mode)
    if oh <= 0 or ow <= 0:
        raise ValueError(
            f"{name}: output would be empty for x of shape {x.shape}, kernel {k}, stride {s}, pads {p}"
        )
    return k, s, p


def max_pool_2d(
    x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False
) -> Tensor:
    """Max pooling of NCHW ``x`` over kh x kw windows.

    Args:
        kernel_size: int or (kh, kw).
        stride: int or (sh, sw); None means the kernel size.
        padding: int, (ph, pw) or (top, left, bottom, right) (ONNX pads order);
            padded cells never win; each must be smaller than the kernel.
        ceil_mode: round the output size up (PyTorch/ONNX ``ceil_mode``).

    Ties: the gradient goes to the first maximum of the window in row-major order.
    """
    k, s, p = _pool_args("max_pool_2d", x, kernel_size, stride, padding, ceil_mode)
    return MaxPool2d(k, s, p, ceil_mode)(x)[0]


def avg_pool_2d(
    x: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = False,
) -> Tensor:
    """Average pooling of NCHW ``x`` over kh x kw windows (zero padding).

    Args are those of :func:`max_pool_2d`, plus ``count_include_pad``: divide by the
    window size counting padded cells, or by the number of real cells (the default, as
    SINGA's oneDNN and cuDNN kernels and ONNX's AveragePool default). With
    ``ceil_mode`` the cells beyond the padding are never counted (as PyTorch).
    """
    k, s, p = _pool_args("avg_pool_2d", x, kernel_size, stride, padding, ceil_mode)
    return AvgPool2d(k, s, p, ceil_mode, count_include_pad)(x)[0]


def global_avg_pool(x: Tensor) -> Tensor:
    """Mean over H and W of NCHW ``x``: (N, C, H, W) -> (N, C, 1, 1) (ONNX GlobalAveragePool)."""
    if x.ndim() != 4 or x.shape[2] * x.shape[3] == 0:
        raise ValueError(f"global_avg_pool: x must be (N, C, H, W) with H, W > 0, got shape {x.shape}")
    return GlobalAvgPool()(x)[0]


def globalaveragepool(x: Tensor, data_format: str = "channels_first") -> Tensor:
    """Mean over the spatial axes of ``x``, kept as size-1 axes (SINGA's name; ONNX
    GlobalAveragePool): (N, C, d1, ..., dk) -> (N, C, 1, ..., 1) for "channels_first",
    (N, d1, ..., dk, C) -> (N, 1, ..., 1, C) for "channels_last" (SINGA's tests also
    write "channel_last"); any k >= 1."""
    data_format = {"channel_first": "channels_first", "channel_last": "channels_last"}.get(
        data_format, data_format
    )
    if data_format not in ("channels_first", "channels_last"):
        raise ValueError(
            f"globalaveragepool: data_format must be 'channels_first' or 'channels_last', got {data_format!r}"
        )
    r = x.ndim()
    if r < 3 or 0 in x.shape[1:]:
        raise ValueError(
            f"globalaveragepool: x needs a batch, a channel and spatial axes, got shape {x.shape}"
        )
    return GlobalAvgPool(data_format == "channels_last")(x)[0]


def _pool1d_args(name: str, x: Tensor, kernel_size: Any, stride: Any, padding: Any, ceil_mode: bool) -> tuple:
    if x.ndim() != 3:
        raise ValueError(f"{name}: x must be (N, C, L), got shape {x.shape}")
    (k,) = geo.ints(kernel_size, 1, "kernel_size", name)
    (s,) = (k,) if stride is None else geo.ints(stride, 1, "stride", name)
    p = geo.pads(padding, 1, name)
    fake = Tensor.wrap(x.data[:, :, None, :], x.device)
    _pool_args(name, fake, (1, k), (1, s), (0, p[0], 0, p[1]), ceil_mode)
    return (k,), (s,), p


def max_pool_1d(
    x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False
) -> Tensor:
    """Max pooling of (N, C, L) ``x`` over windows of ``kernel_size``; ``padding`` is
    an int or (begin, end). See :func:`max_pool_2d`."""
    k, s, p = _pool1d_args("max_pool_1d", x, kernel_size, stride, padding, ceil_mode)
    return MaxPool2d(k, s, p, ceil_mode, spatial_dims=1)(x)[0]


def avg_pool_1d(
    x: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = False,
) -> Tensor:
    """Average pooling of (N, C, L) ``x``; see :func:`avg_pool_2d` and :func:`max_pool_1d`."""
    k, s, p = _pool1d_args("avg_pool_1d", x, kernel_size, stride, padding, ceil_mode)
    return AvgPool2d(k, s, p, ceil_mode, count_include_pad, spatial_dims=1)(x)[0]
