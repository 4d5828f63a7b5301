"""Pooling over any number of spatial axes (1-D, 2-D, 3-D, ...) with dilation, and
max pooling that also returns ONNX-style indices.

:func:`max_pool_nd` / :func:`avg_pool_nd` hand the plain 1-D and 2-D cases (no
dilation, no indices) to the fast operators of :mod:`singa.autograd.pooling`; the
rest runs here, on windows taken as prod(kernel) strided views of the padded input
(the same scheme, written for N spatial axes).

Geometry along each spatial axis (PyTorch/ONNX): the window starting at output
``o`` reads cells ``o*s - begin + j*d`` for ``j < k``; the output length is
floor((L + begin + end - d*(k-1) - 1) / s) + 1, or with ``ceil_mode`` the ceiling,
minus one when the last window would start beyond the input plus its begin padding.
Every window must hold at least one real cell.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

import singa.autograd.pooling as pooling
import singa.kernels.conv_geometry as geo
from singa.autograd.engine import Operation
from singa.device import array_module
from singa.tensor import Tensor

__all__ = ["max_pool_nd", "avg_pool_nd", "max_pool_3d", "avg_pool_3d"]


class _PoolingND(Operation):
    """Shared geometry of :class:`MaxPoolNd` and :class:`AvgPoolNd`.

    Attributes (read by graph replay and the ONNX exporter), one entry per spatial axis:
        kernel_size, stride, dilation: tuples of ints.
        pads: (begin_1, ..., begin_n, end_1, ..., end_n): ONNX ``pads`` order.
        ceil_mode: output size rounded up.
    """

    def __init__(
        self, kernel_size: tuple, stride: tuple, pads: tuple, dilation: tuple, ceil_mode: bool = False
    ):
        super().__init__()
        self.kernel_size = tuple(int(k) for k in kernel_size)
        self.stride = tuple(int(s) for s in stride)
        self.pads = tuple(int(p) for p in pads)
        self.dilation = tuple(int(d) for d in dilation)
        self.ceil_mode = bool(ceil_mode)

    @property
    def nd(self) -> int:
        """Number of spatial axes."""
        return len(self.kernel_size)

    def out_shape(self, sizes: tuple) -> tuple:
        """The output's spatial sizes for input spatial sizes ``sizes``."""
        nd = self.nd
        return tuple(
            geo.out_size(n, k, s, self.pads[i], self.pads[i + nd], d, ceil_mode=self.ceil_mode)
            for i, (n, k, s, d) in enumerate(zip(sizes, self.kernel_size, self.stride, self.dilation))
        )

    def _padded(self, x: Any, xp: Any, fill: float, outs: tuple) -> Any:
        """``x`` padded by ``pads`` plus the cells that ceil mode's last windows reach."""
        nd = self.nd
        width = [(0, 0), (0, 0)]
        for i, (n, k, s, d, o) in enumerate(
            zip(x.shape[2:], self.kernel_size, self.stride, self.dilation, outs)
        ):
            b, e = self.pads[i], self.pads[i + nd]
            e += max(0, (o - 1) * s + (k - 1) * d + 1 - (n + b + e))
            width.append((b, e))
        if all(w == (0, 0) for w in width):
            return x
        out = xp.full(
            x.shape[:2] + tuple(n + b + e for n, (b, e) in zip(x.shape[2:], width[2:])), fill, x.dtype
        )
        out[
            (slice(None), slice(None)) + tuple(slice(b, b + n) for n, (b, _) in zip(x.shape[2:], width[2:]))
        ] = x
        return out

    def _offsets(self, outs: tuple) -> list:
        """(offset tuple, index of the strided view) for every cell of the kernel, row-major."""
        res = []
        for js in itertools.product(*(range(k) for k in self.kernel_size)):
            view = (slice(None), slice(None)) + tuple(
                slice(j * d, j * d + s * (o - 1) + 1, s)
                for j, d, s, o in zip(js, self.dilation, self.stride, outs)
            )
            res.append((js, view))
        return res

    def _crop(self, dxp: Any, sizes: tuple) -> Any:
        if tuple(dxp.shape[2:]) == tuple(sizes):
            return dxp
        return dxp[(slice(None), slice(None)) + tuple(slice(b, b + n) for b, n in zip(self.pads, sizes))]

    def _axis_real(self, axis: int, j: int, o: int, lo: int, hi: int) -> np.ndarray:
        """Host boolean (o,) mask along ``axis``: whether offset ``j`` of the window of
        each output lies in [lo, hi)."""
        pos = np.arange(o) * self.stride[axis] - self.pads[axis] + j * self.dilation[axis]
        return (pos >= lo) & (pos < hi)


class MaxPoolNd(_PoolingND):
    """y = max over each window; padded cells never win. With ``return_indices`` a
    second int64 output holds, for each output cell, the flat index of the cell that
    won in the whole input (ONNX MaxPool ``Indices``: the index over
    N x C x D1 x ... x Dn, the spatial part row-major, or column-major when
    ``storage_order`` is 1).

    Ties go to the first maximum of the window in row-major order, which also takes the
    gradient. A NaN maximum gets no gradient and index -1.
    """

    def __init__(
        self,
        kernel_size: tuple,
        stride: tuple,
        pads: tuple,
        dilation: tuple,
        ceil_mode: bool = False,
        return_indices: bool = False,
        storage_order: int = 0,
    ):
        super().__init__(kernel_size, stride, pads, dilation, ceil_mode)
        self.return_indices = bool(return_indices)
        self.storage_order = int(storage_order)

    def forward(self, x):
        xp = array_module(x)
        sizes = x.shape[2:]
        outs = self.out_shape(sizes)
        xpad = self._padded(x, xp, -xp.inf, outs)
        offs = self._offsets(outs)
        y = xpad[offs[0][1]].copy()
        for _, view in offs[1:]:
            xp.maximum(y, xpad[view], out=y)
        arg = None
        if self.requires_grad or self.return_indices:
            arg = self._argmax(xp, xpad, y, offs, sizes, outs)
        if self.requires_grad:
            self.cache = (x.shape, xpad.shape, arg)
        if not self.return_indices:
            return y
        return y, self._indices(xp, x.shape, outs, arg)

    def _argmax(self, xp: Any, xpad: Any, y: Any, offs: list, sizes: tuple, outs: tuple) -> Any:
        """The number (row-major in the kernel) of each window's first maximum; -1 for NaN."""
        arg = xp.full(y.shape, -1, dtype=np.int32)
        padded = any(self.pads) or xpad.shape[2:] != tuple(sizes)
        m = xp.empty(y.shape, dtype=bool)
        for num, (js, view) in enumerate(offs):
            xp.equal(xpad[view], y, out=m)
            m &= arg < 0
            if padded:  # a padded -inf cell must not match a window whose maximum is -inf
                real = np.ones(outs, dtype=bool)
                for a, j in enumerate(js):
                    shape = [1] * len(outs)
                    shape[a] = outs[a]
                    real = real & self._axis_real(a, j, outs[a], 0, sizes[a]).reshape(shape)
                m &= xp.asarray(real)
            arg[m] = num
        return arg

    def _indices(self, xp: Any, xshape: tuple, outs: tuple, arg: Any) -> Any:
        sizes = xshape[2:]
        nd = self.nd
        flat = xp.zeros(arg.shape, dtype=np.int64)
        rest = arg.astype(np.int64)
        mult = [math.prod(sizes[i + 1 :]) for i in range(nd)]
        if self.storage_order == 1:
            mult = [math.prod(sizes[:i]) for i in range(nd)]
        for a in reversed(range(nd)):
            j = rest % self.kernel_size[a]
            rest //= self.kernel_size[a]
            shape = [1] * (nd + 2)
            shape[a + 2] = outs[a]
            start = xp.asarray(np.arange(outs[a]) * self.stride[a] - self.pads[a]).reshape(shape)
            flat += (start + j * self.dilation[a]) * mult[a]
        n, c = xshape[:2]
        base = xp.arange(n * c, dtype=np.int64).reshape(n, c, *([1] * nd)) * math.prod(sizes)
        return xp.where(arg < 0, -1, flat + base)

    def backward(self, dy, di=None):
        xshape, pshape, arg = self.cache
        xp = array_module(dy)
        outs = dy.shape[2:]
        dxp = xp.zeros(pshape, dtype=dy.dtype)
        for num, (_, view) in enumerate(self._offsets(outs)):
            dxp[view] += xp.where(arg == num, dy, 0)
        return self._crop(dxp, xshape[2:])


class AvgPoolNd(_PoolingND):
    """y = mean over each window (zero padding).

    ``count_include_pad``: divide by the number of window cells inside the input plus
    its padding (never counting the cells beyond the padding that ceil mode's last
    windows reach, as PyTorch and ONNX); otherwise by the number of real cells.
    """

    def __init__(
        self,
        kernel_size: tuple,
        stride: tuple,
        pads: tuple,
        dilation: tuple,
        ceil_mode: bool = False,
        count_include_pad: bool = False,
    ):
        super().__init__(kernel_size, stride, pads, dilation, ceil_mode)
        self.count_include_pad = bool(count_include_pad)

    def _scale(self, xp: Any, sizes: tuple, outs: tuple, dtype: Any) -> Any:
        """1 / divisor: a Python float when every window shares it, else an array
        broadcasting over the spatial axes."""
        nd = self.nd
        total = np.ones(outs)
        for a, (n, k, o) in enumerate(zip(sizes, self.kernel_size, outs)):
            lo, hi = (-self.pads[a], n + self.pads[a + nd]) if self.count_include_pad else (0, n)
            cnt = sum(self._axis_real(a, j, o, lo, hi).astype(np.int64) for j in range(k))
            shape = [1] * nd
            shape[a] = o
            total = total * cnt.reshape(shape)
        if (total == total.flat[0]).all():
            return 1.0 / float(total.flat[0])
        return xp.asarray(1.0 / total, dtype=dtype)

    def forward(self, x):
        xp = array_module(x)
        sizes = x.shape[2:]
        outs = self.out_shape(sizes)
        xpad = self._padded(x, xp, 0, outs)
        offs = self._offsets(outs)
        y = xpad[offs[0][1]].copy()
        for _, view in offs[1:]:
            y += xpad[view]
        y *= self._scale(xp, sizes, outs, x.dtype)
        if self.requires_grad:
            self.cache = (x.shape, xpad.shape)
        return y

    def backward(self, dy):
        xshape, pshape = self.cache
        xp = array_module(dy)
        outs = dy.shape[2:]
        g = dy * self._scale(xp, xshape[2:], outs, dy.dtype)
        dxp = xp.zeros(pshape, dtype=dy.dtype)
        for _, view in self._offsets(outs):
            dxp[view] += g
        return self._crop(dxp, xshape[2:])


def _nd_args(
    name: str, x: Tensor, kernel_size: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool, nd: Any
) -> tuple:
    """Validate and normalise N-D pooling arguments -> (kernel, stride, pads, dilation)."""
    if nd is None:
        nd = x.ndim() - 2
        if nd < 1:
            raise ValueError(
                f"{name}: x must be (N, C, D1, ...) with at least one spatial axis, got shape {x.shape}"
            )
    elif x.ndim() != nd + 2:
        axes = ", ".join(f"D{i + 1}" for i in range(nd))
        raise ValueError(f"{name}: x must be (N, C, {axes}), got shape {x.shape}")
    k = geo.ints(kernel_size, nd, "kernel_size", name)
    s = k if stride is None else geo.ints(stride, nd, "stride", name)
    d = geo.ints(dilation, nd, "dilation", name)
    p = geo.pads(padding, nd, name)
    sizes = x.shape[2:]
    for a, n in enumerate(sizes):
        o = geo.out_size(n, k[a], s[a], p[a], p[a + nd], d[a], ceil_mode=ceil_mode)
        if o <= 0:
            raise ValueError(
                f"{name}: output would be empty for x of shape {x.shape}, kernel {k}, stride {s}, "
                f"pads {p}, dilation {d}"
            )
        for i in range(o):
            start = i * s[a] - p[a]
            if not any(0 <= start + j * d[a] < n for j in range(k[a])):
                raise ValueError(
                    f"{name}: window {i} along spatial axis {a} holds only padding "
                    f"(x of shape {x.shape}, kernel {k}, stride {s}, pads {p}, dilation {d})"
                )
    return k, s, p, d


def _fast(nd: int, k: tuple, p: tuple, d: tuple) -> bool:
    """Whether :mod:`singa.autograd.pooling`'s 1-D/2-D operators handle the case."""
    return (
        nd in (1, 2) and all(v == 1 for v in d) and all(p[a] < k[a] and p[a + nd] < k[a] for a in range(nd))
    )


def max_pool_nd(
    x: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
    storage_order: int = 0,
) -> Tensor | tuple[Tensor, Tensor]:
    """Max pooling of (N, C, D1, ..., Dn) ``x`` (any n >= 1) over dilated windows.

    Args:
        kernel_size, stride, dilation: int or one int per spatial axis; stride None
            means the kernel size.
        padding: int, one int per axis (both sides) or 2n ints in ONNX ``pads`` order
            (begin_1, ..., begin_n, end_1, ..., end_n); padded cells never win.
        ceil_mode: round the output size up (PyTorch/ONNX ``ceil_mode``).
        return_indices: also return int64 indices as ONNX MaxPool's ``Indices`` output:
            each output's winning cell as a flat index into the whole input
            (N x C x D1 x ... x Dn), spatial part row-major (``storage_order`` 0) or
            column-major (``storage_order`` 1).

    Returns:
        y, or (y, indices) with ``return_indices``. Ties go to the first maximum of the
        window in row-major order (which also takes the gradient).
    """
    k, s, p, d = _nd_args("max_pool_nd", x, kernel_size, stride, padding, dilation, ceil_mode, None)
    if storage_order not in (0, 1):
        raise ValueError(f"max_pool_nd: storage_order must be 0 or 1, got {storage_order!r}")
    nd = len(k)
    if not return_indices and _fast(nd, k, p, d):
        if nd == 1:
            return pooling.max_pool_1d(x, k[0], s[0], p, ceil_mode)
        return pooling.max_pool_2d(x, k, s, p, ceil_mode)
    op = MaxPoolNd(k, s, p, d, ceil_mode, return_indices, storage_order)
    ys = op(x)
    return (ys[0], ys[1]) if return_indices else ys[0]


def avg_pool_nd(
    x: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    count_include_pad: bool = False,
) -> Tensor:
    """Average pooling of (N, C, D1, ..., Dn) ``x`` (any n >= 1) over dilated windows
    (zero padding).

    Args are those of :func:`max_pool_nd`, plus ``count_include_pad``: divide by the
    number of window cells inside the input and its padding, or by the number of real
    cells (the default, as SINGA's kernels and ONNX's AveragePool default). Cells
    beyond the padding that ceil mode reaches are never counted.
    """
    k, s, p, d = _nd_args("avg_pool_nd", x, kernel_size, stride, padding, dilation, ceil_mode, None)
    nd = len(k)
    if _fast(nd, k, p, d):
        if nd == 1:
            return pooling.avg_pool_1d(x, k[0], s[0], p, ceil_mode, count_include_pad)
        return pooling.avg_pool_2d(x, k, s, p, ceil_mode, count_include_pad)
    return AvgPoolNd(k, s, p, d, ceil_mode, count_include_pad)(x)[0]


def max_pool_3d(
    x: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
) -> Tensor:
    """Max pooling of (N, C, D, H, W) ``x``; see :func:`max_pool_nd`."""
    k, s, p, d = _nd_args("max_pool_3d", x, kernel_size, stride, padding, dilation, ceil_mode, 3)
    return MaxPoolNd(k, s, p, d, ceil_mode)(x)[0]


def avg_pool_3d(
    x: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    count_include_pad: bool = False,
) -> Tensor:
    """Average pooling of (N, C, D, H, W) ``x``; see :func:`avg_pool_nd`."""
    k, s, p, d = _nd_args("avg_pool_3d", x, kernel_size, stride, padding, dilation, ceil_mode, 3)
    return AvgPoolNd(k, s, p, d, ceil_mode, count_include_pad)(x)[0]
