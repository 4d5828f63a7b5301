"""Normalization: batch normalization over (N, C, ...) inputs and layer normalization.

Per-channel sums over the axes (0, 2, 3) are computed with BLAS matrix-vector
products against a vector of ones (faster on the CPU than
``x.sum(axis=(0, 2, 3))``), per-channel coefficients are applied as full rows, and
backward works from the cached input without materialising ``xhat``. An input
whose memory is NHWC (what :func:`conv2d` returns) is worked on in that layout, as
rows of pixel-major samples, and the output and input gradient keep it, so the next
convolution and the previous one's backward never see a transposed copy. Timings
against PyTorch and plain numpy: ``bench/README.md``, "Design measurements".
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from singa.autograd.engine import Operation, check_same_dtype, is_training, unbroadcast
from singa.autograd.linalg import ones_vector
from singa.device import array_module
from singa.kernels import batchnorm as bn_kernels
from singa.kernels import workers
from singa.kernels.buffers import scratch
from singa.kernels.im2col import is_channels_last
from singa.kernels.jit import takes_floats
from singa.kernels.layer_norm import layer_norm_rows, layer_norm_rows_grad, row_constants
from singa.tensor import Tensor

__all__ = ["batchnorm_2d", "layer_norm", "rms_norm"]


def _chan_sum(x3: Any) -> Any:
    """Sum of x3 (N, C, S) over axes 0 and 2, shape (C,)."""
    n, c, s = x3.shape
    if s == 1:
        return ones_vector(x3, n) @ x3.reshape(n, c)
    return ones_vector(x3, n) @ (x3.reshape(n * c, s) @ ones_vector(x3, s)).reshape(n, c)


def _chan_dot(a3: Any, b3: Any) -> Any:
    """Sum of a3 * b3 (both (N, C, S)) over axes 0 and 2, shape (C,)."""
    n, c, s = a3.shape
    if s == 1:
        return ones_vector(a3, n) @ (a3 * b3).reshape(n, c)
    a2, b2 = a3.reshape(n * c, s), b3.reshape(n * c, s)
    if s >= 32:  # one dot product per (sample, channel) row, batched through BLAS
        rows = (a2[:, None, :] @ b2[:, :, None]).reshape(n, c)
    else:
        rows = ((a2 * b2) @ ones_vector(a3, s)).reshape(n, c)
    return ones_vector(a3, n) @ rows


def _rows(coef: Any, s: int, dt: Any) -> Any:
    """A per-channel vector (C,) spread to one row (1, C * s) matching x.reshape(N, C * s).

    Broadcasting a full row is faster in numpy than broadcasting (1, C, 1, 1) over
    (N, C, H, W) (contiguous SIMD loops instead of stride-0 ones).
    """
    coef = coef.astype(dt, copy=False)
    return (coef if s == 1 else array_module(coef).repeat(coef, s)).reshape(1, -1)


class _ChannelMajor:
    """Per-channel arithmetic on x (N, C, ...) seen as rows (N, C*S) in memory order,
    for NCHW memory (channel-major rows)."""

    def __init__(self, shape: tuple):
        self.shape = shape
        self.n, self.c = shape[:2]
        self.s = math.prod(shape[2:])
        self.blocks = (1, self.c, self.s)  # a row's (outer, channel, inner) axes

    def rows(self, a: Any) -> Any:
        return a.reshape(self.n, self.c * self.s)

    def sum(self, a2: Any) -> Any:
        return _chan_sum(a2.reshape(self.n, self.c, self.s))

    def dot(self, a2: Any, b2: Any) -> Any:
        return _chan_dot(a2.reshape(self.n, self.c, self.s), b2.reshape(self.n, self.c, self.s))

    def spread(self, coef: Any, dt: Any) -> Any:
        return _rows(coef, self.s, dt)

    def restore(self, y2: Any) -> Any:
        return y2.reshape(self.shape)


class _ChannelLast(_ChannelMajor):
    """The same for NHWC memory (what :func:`conv2d` returns): rows are pixel-major
    samples (N, S*C), worked on in place of a transposed copy; results keep the layout,
    so the next convolution and the previous one's backward never see a transposed copy."""

    def __init__(self, shape: tuple):
        super().__init__(shape)
        self.blocks = (self.s, self.c, 1)

    def rows(self, a: Any) -> Any:
        return a.transpose(0, 2, 3, 1).reshape(self.n, self.s * self.c)  # a view for NHWC memory

    def sum(self, a2: Any) -> Any:
        return ones_vector(a2, self.s) @ (ones_vector(a2, self.n) @ a2).reshape(self.s, self.c)

    def dot(self, a2: Any, b2: Any) -> Any:
        return self.sum(a2 * b2)

    def spread(self, coef: Any, dt: Any) -> Any:
        coef = coef.astype(dt, copy=False)
        return array_module(coef).tile(coef, self.s).reshape(1, -1)

    def restore(self, y2: Any) -> Any:
        n, c, h, w = self.shape
        return y2.reshape(n, h, w, c).transpose(0, 3, 1, 2)


def _layout(x: Any) -> _ChannelMajor:
    return _ChannelLast(x.shape) if x.ndim == 4 and is_channels_last(x) else _ChannelMajor(x.shape)


# ----- the CPU passes: singa.kernels.batchnorm (compiled, on the workers) -------------------
def _kernel_rows(lay: _ChannelMajor, a: Any) -> Any:
    """``a`` as C-contiguous rows in ``lay``'s memory order, float16 as float32 (numba
    has no float16 on the CPU)."""
    rows = np.ascontiguousarray(lay.rows(a))
    return rows.astype(np.float32) if rows.dtype == np.float16 else rows


def _pieces(lay: _ChannelMajor) -> list:
    """Batch pieces for the kernels (each reads one or two arrays and writes one)."""
    return workers.work_pieces(lay.n, 2 * lay.n * lay.c * lay.s)


class BatchNorm2d(Operation):
    """Batch normalization of x (N, C, ...) per channel C.

    Training: normalise with the batch mean and biased variance, and update the
    running statistics in place: ``running = momentum * running + (1 - momentum) *
    batch_stat`` (the running variance takes the unbiased batch variance). Eval:
    normalise with the running statistics (a plain per-channel affine map).

    On the CPU the passes over memory are compiled kernels run over batch pieces on
    the worker threads (:mod:`singa.kernels.batchnorm`);
    on a GPU the same formulas run as array expressions.
    """

    def __init__(self, momentum: float = 0.9, eps: float = 1e-5, training: bool = True):
        super().__init__()
        self.momentum = float(momentum)
        self.eps = float(eps)
        self.training = bool(training)

    def _update_running(self, running_mean, running_var, m, var, count):
        mom = self.momentum
        running_mean *= mom
        running_mean += (1.0 - mom) * m
        running_var *= mom
        running_var += ((1.0 - mom) * count / max(count - 1, 1)) * var

    def forward(self, x, scale, bias, running_mean, running_var):
        if isinstance(x, np.ndarray):
            return self._forward_cpu(x, scale, bias, running_mean, running_var)
        xp = array_module(x)
        lay = _layout(x)
        count = lay.n * lay.s
        dt = x.dtype
        x2 = lay.rows(x)
        if self.training:
            m = lay.sum(x2) * (1.0 / count)
            y = x2 - lay.spread(m, dt)
            var = lay.dot(y, y) * (1.0 / count)
            invstd = 1.0 / xp.sqrt(var + self.eps)
            y *= lay.spread(scale * invstd, dt)
            y += lay.spread(bias, dt)
            self._update_running(running_mean, running_var, m, var, count)
            if self.requires_grad:
                self.cache = (x, m, invstd, scale)
        else:
            invstd = 1.0 / xp.sqrt(running_var + self.eps)
            a = scale * invstd
            y = x2 * lay.spread(a, dt)
            y += lay.spread(bias - running_mean * a, dt)
            if self.requires_grad:
                self.cache = (x, running_mean.copy(), invstd, scale)
        return lay.restore(y)

    def forward_relu(self, x, scale, bias, running_mean, running_var):
        """``max(forward(...), 0)`` in one pass (numpy float32 or float64 ``x``): what a
        training graph runs for a BatchNorm whose only user is a ReLU
        (:mod:`singa.model.training_fusion`); the bits of the two operators in turn."""
        return self._forward_cpu(x, scale, bias, running_mean, running_var, relu=True)

    def forward_add_relu(self, x, scale, bias, running_mean, running_var, residual):
        """``max(forward(...) + residual, 0)`` in one pass (numpy float32 or float64 ``x``
        and a ``residual`` of its shape and dtype): a residual block's end, as a training
        graph runs it (:mod:`singa.model.training_fusion`); the bits of BatchNorm, the
        sum and ReLU in turn."""
        return self._forward_cpu(x, scale, bias, running_mean, running_var, relu=True, residual=residual)

    def backward_gated(self, dy, y):
        """:meth:`backward` of ``dy * (y > 0)``, ReLU's gradient gate applied inside
        BatchNorm's two passes instead of in a pass of its own (``y`` the output of
        :meth:`forward_relu`; numpy float32 or float64); the bits of the two backwards
        in turn."""
        return self._backward_cpu(dy, gate=y)

    def _forward_cpu(self, x, scale, bias, running_mean, running_var, relu=False, residual=None):
        lay = _layout(x)
        count = lay.n * lay.s
        x2 = _kernel_rows(lay, x)
        dt = x2.dtype
        pieces = _pieces(lay)
        if self.training:
            # statistics of x - k in one pass, k each channel's mean over the first few
            # samples: close to the batch mean, so the sums stay as accurate as centred ones
            k = bn_kernels.first_rows_mean(x2, lay.blocks)
            k_row = lay.spread(k, dt)[0]
            sums = bn_kernels.run_sums(x2, k_row, x2, k_row, lay.blocks, pieces)
            shift = sums[0] / count
            m = k + shift
            var = np.maximum(sums[1] / count - shift * shift, 0.0)
            self._update_running(running_mean, running_var, m, var, count)
        else:
            m, var = running_mean.astype(np.float64), running_var.astype(np.float64)
        invstd = 1.0 / np.sqrt(var + self.eps)
        m_row, a_row, b_row = (lay.spread(v, dt)[0] for v in self._coefficients(m, invstd, scale, bias, dt))
        y2 = scratch(np, x2.shape, dt)
        add, r2 = residual is not None, x2 if residual is None else _kernel_rows(lay, residual)
        workers.run_pieces(
            lambda i, j: bn_kernels.normalise(x2[i:j], m_row, a_row, b_row, r2[i:j], add, relu, y2[i:j]),
            pieces,
        )
        if self.requires_grad:
            self.cache = (x, m, invstd, scale)
        return lay.restore(y2.astype(x.dtype, copy=False))

    @staticmethod
    def _coefficients(m: Any, invstd: Any, scale: Any, bias: Any, dt: Any) -> tuple:
        """(m, a, b) per channel in dtype ``dt``: the CPU forward computes
        ``y = (x - m) * a + b`` in ``dt`` from them."""
        return m.astype(dt), (scale * invstd).astype(dt), bias.astype(dt)

    def eval_coefficients(self, scale: Any, bias: Any, running_mean: Any, running_var: Any, dt: Any) -> tuple:
        """(m, a, b) per channel in dtype ``dt`` (float32 or float64) with which the CPU
        evaluation forward computes ``y = (x - m) * a + b``, each step rounded to ``dt``:
        a kernel that computes the same expression from them gives this operator's bits
        (:class:`~singa.kernels.conv_epilogue.Epilogue` does)."""
        m, var = np.asarray(running_mean, np.float64), np.asarray(running_var, np.float64)
        return self._coefficients(m, 1.0 / np.sqrt(var + self.eps), scale, bias, dt)

    def backward(self, dy):
        if isinstance(dy, np.ndarray):
            return self._backward_cpu(dy)
        x, m, invstd, scale = self.cache
        lay = _layout(x)
        count = lay.n * lay.s
        dt = dy.dtype
        dy2 = lay.rows(dy)
        sdy = lay.sum(dy2)
        need_x, need_s, need_b = self.needs_grad[:3]
        dscale = xc = None
        if need_s or (need_x and self.training):
            # sum(dy * xhat) = invstd * sum(dy * (x - mean)); centring first keeps float32
            # accurate when a channel's mean is large against its spread
            xc = lay.rows(x) - lay.spread(m, dt)
            dscale = invstd * lay.dot(dy2, xc)
        dx = None
        if need_x:
            a = scale * invstd
            dx = dy2 * lay.spread(a, dt)
            if self.training:
                # dx = a * (dy - sum(dy)/M - xhat * sum(dy*xhat)/M), written as
                # a*dy + kx*(x - mean) + k0 per channel without materialising xhat
                xc *= lay.spread(-a * invstd * dscale / count, dt)
                dx += xc
                dx += lay.spread(-a * sdy / count, dt)
            dx = lay.restore(dx)
        return self._grads(dx, dscale, sdy, scale)

    def _grads(self, dx, dscale, sdy, scale):
        need_s, need_b = self.needs_grad[1:3]
        # the running statistics get no gradient: (dx, dscale, dbias), as SINGA returns
        return (
            dx,
            dscale.astype(scale.dtype, copy=False) if need_s else None,
            sdy.astype(scale.dtype, copy=False) if need_b else None,
        )

    def _backward_cpu(self, dy, gate=None):
        x, m, invstd, scale = self.cache
        lay = _layout(x)
        count = lay.n * lay.s
        x2, dy2 = _kernel_rows(lay, x), _kernel_rows(lay, dy)
        g2 = None if gate is None else _kernel_rows(lay, gate)
        dt = dy2.dtype
        pieces = _pieces(lay)
        m_row = lay.spread(m, dt)[0]
        # sum(dy * xhat) = invstd * sum(dy * (x - mean)): centred, so float32 stays
        # accurate when a channel's mean is large against its spread
        sdy, sdx = bn_kernels.run_sums(dy2, np.zeros_like(m_row), x2, m_row, lay.blocks, pieces, g2)
        dscale = invstd * sdx
        dx = None
        if self.needs_grad[0]:
            a = scale * invstd
            # dx = a * (dy - sum(dy)/M - xhat * sum(dy*xhat)/M) = a*dy + kx*(x - mean) + k0
            kx, k0 = (-a * invstd * dscale / count, -a * sdy / count) if self.training else (0 * a, 0 * a)
            rows = [lay.spread(v, dt)[0] for v in (a, kx, k0)]
            dx2 = scratch(np, dy2.shape, dt)
            train = self.training

            on, g2 = g2 is not None, dy2 if g2 is None else g2

            def piece(i, j):
                bn_kernels.input_grad(dy2[i:j], x2[i:j], m_row, *rows, train, g2[i:j], on, dx2[i:j])

            workers.run_pieces(piece, pieces)
            dx = lay.restore(dx2.astype(dy.dtype, copy=False))
        return self._grads(dx, dscale, sdy, scale)


def batchnorm_2d(
    x: Tensor,
    scale: Tensor,
    bias: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
    momentum: float = 0.9,
    eps: float = 1e-5,
    training: bool | None = None,
) -> Tensor:
    """Batch normalization of ``x`` of shape (N, C, H, W) (or (N, C), or (N, C, L)).

    ``y = scale * (x - mean) / sqrt(var + eps) + bias`` per channel. In training
    (``training`` None means ``singa.autograd.training``) mean and biased variance
    come from the batch, and ``running_mean``/``running_var`` (shape (C,)) are
    updated IN PLACE as ``running = momentum * running + (1 - momentum) * stat``,
    with the unbiased batch variance for ``running_var``. In eval the running
    statistics are used. ``scale`` and ``bias`` have shape (C,) and get gradients.
    """
    if training is None:
        training = is_training()
    if x.ndim() < 2:
        raise ValueError(f"batchnorm_2d: x must be (N, C, ...), got shape {x.shape}")
    if x.data.dtype.kind != "f":
        check_same_dtype("batchnorm_2d", x, floating=True)
    c = x.shape[1]
    for name, t in (
        ("scale", scale),
        ("bias", bias),
        ("running_mean", running_mean),
        ("running_var", running_var),
    ):
        if t.size() != c or t.ndim() != 1:
            raise ValueError(
                f"batchnorm_2d: {name} of shape {t.shape} does not match x of shape {x.shape} (C={c})"
            )
    if training and x.size() // c <= 1:
        raise ValueError(
            f"batchnorm_2d: training needs more than one value per channel, x has shape {x.shape}"
        )
    return BatchNorm2d(momentum, eps, training)(x, scale, bias, running_mean, running_var)[0]


class LayerNorm(Operation):
    """ONNX LayerNormalization: normalise over the axes ``axis``..end, then
    ``y = xhat * scale + bias`` (scale and bias broadcast to x.shape[axis:]). float32
    and float64 numpy arrays take the compiled row kernels of
    :mod:`singa.kernels.layer_norm` on the workers; others the array expression."""

    def __init__(self, axis: int = -1, eps: float = 1e-5):
        super().__init__()
        self.axis = axis
        self.eps = float(eps)

    def forward(self, x, scale, bias=None):
        inner = x.shape[self.axis :]
        d = math.prod(inner)
        xp = array_module(x)
        s1 = xp.broadcast_to(scale.astype(x.dtype, copy=False), inner).reshape(d)
        b1 = None if bias is None else xp.broadcast_to(bias.astype(x.dtype, copy=False), inner).reshape(d)
        shapes = (scale.shape, None if bias is None else bias.shape)
        if takes_floats(x) and d > 0:
            y = self._forward_rows(x.reshape(-1, d), s1, b1, shapes)
        else:
            y = self._forward_expression(xp, x.reshape(-1, d), s1, b1, shapes)
        return y.reshape(x.shape)

    def _forward_rows(self, x2: Any, s1: Any, b1: Any, shapes: tuple) -> Any:
        x2 = np.ascontiguousarray(x2)
        r, d = x2.shape
        s1 = np.ascontiguousarray(s1)
        b1 = np.zeros(d, x2.dtype) if b1 is None else np.ascontiguousarray(b1)
        y = np.empty_like(x2)
        mean, invstd = np.empty(r, x2.dtype), np.empty(r, x2.dtype)
        k = row_constants(d, self.eps, x2.dtype)
        workers.run_pieces(
            lambda i, j: layer_norm_rows(x2[i:j], s1, b1, k, y[i:j], mean[i:j], invstd[i:j]),
            workers.work_pieces(r, 4 * r * d),
        )
        if self.requires_grad:
            self.cache = (self._backward_rows, (x2, s1, mean, invstd), shapes)
        return y

    def _forward_expression(self, xp: Any, x2: Any, s1: Any, b1: Any, shapes: tuple) -> Any:
        d = x2.shape[1]
        ones = ones_vector(x2, d)
        m = (x2 @ ones) * (1.0 / d)
        xhat = x2 - m[:, None]
        var = ((xhat * xhat) @ ones) * (1.0 / d)
        invstd = (1.0 / xp.sqrt(var + self.eps))[:, None]
        xhat *= invstd
        y = xhat * s1.reshape(1, d)
        if b1 is not None:
            y += b1.reshape(1, d)
        if self.requires_grad:
            self.cache = (self._backward_expression, (xhat, invstd, s1.reshape(1, d)), shapes)
        return y

    def backward(self, dy):
        grads_of, saved, (sshape, bshape) = self.cache  # the forward's path's backward
        inner = dy.shape[self.axis :]
        dx, dscale, dbias = grads_of(dy.reshape(-1, math.prod(inner)), *saved)
        dscale = unbroadcast(dscale.reshape(inner), sshape) if self.needs_grad[1] else None
        if bshape is None:
            return dx.reshape(dy.shape), dscale
        dbias = unbroadcast(dbias.reshape(inner), bshape) if self.needs_grad[2] else None
        return dx.reshape(dy.shape), dscale, dbias

    def _backward_rows(self, dy2: Any, x2: Any, s1: Any, mean: Any, invstd: Any) -> tuple:
        dy2 = np.ascontiguousarray(dy2, dtype=x2.dtype)
        r, d = x2.shape
        dx = np.empty_like(x2)
        k = row_constants(d, self.eps, x2.dtype)

        def piece(i: int, j: int) -> tuple:
            dscale, dbias = np.zeros(d), np.zeros(d)
            layer_norm_rows_grad(dy2[i:j], x2[i:j], s1, mean[i:j], invstd[i:j], k, dx[i:j], dscale, dbias)
            return dscale, dbias

        parts = workers.run_pieces(piece, workers.work_pieces(r, 6 * r * d))
        dscale, dbias = parts[0]
        for ds, db in parts[1:]:  # in piece order: the same bits for any worker count
            dscale += ds
            dbias += db
        return dx, dscale.astype(x2.dtype), dbias.astype(x2.dtype)

    def _backward_expression(self, dy2: Any, xhat: Any, invstd: Any, s2: Any) -> tuple:
        r, d = xhat.shape
        ones_r = ones_vector(dy2, r)
        dscale = ones_r @ (dy2 * xhat)
        dbias = ones_r @ dy2
        ones_d = ones_vector(dy2, d)
        g = dy2 * s2
        mg = (g @ ones_d) * (1.0 / d)
        mgx = ((g * xhat) @ ones_d) * (1.0 / d)
        g -= mg[:, None]
        t = xhat * mgx[:, None]
        g -= t
        g *= invstd
        return g, dscale, dbias


def layer_norm(x: Tensor, scale: Tensor, bias: Tensor | None, axis: int = -1, eps: float = 1e-5) -> Tensor:
    """ONNX LayerNormalization: normalise ``x`` over the axes ``axis``..end (mean and
    biased variance per leading index), then scale and shift. ``scale`` and ``bias``
    have shape x.shape[axis:] (or broadcast to it); ``bias`` may be None."""
    if x.data.dtype.kind != "f":
        check_same_dtype("layer_norm", x, floating=True)
    r = x.ndim()
    if not -r <= axis < r:
        raise ValueError(f"layer_norm: axis {axis} is out of range for x of shape {x.shape}")
    ax = axis + r if axis < 0 else axis
    inner = tuple(x.shape[ax:])
    for name, t in (("scale", scale), ("bias", bias)):
        if t is None:
            continue
        try:
            ok = np.broadcast_shapes(tuple(t.shape), inner) == inner
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(
                f"layer_norm: {name} of shape {t.shape} does not fit x of shape {x.shape} at axis {axis}"
            )
    op = LayerNorm(ax, eps)
    return (op(x, scale) if bias is None else op(x, scale, bias))[0]


class RMSNorm(Operation):
    """ONNX RMSNormalization: ``y = x / sqrt(mean(x^2) + eps) * scale``, the mean over
    the axes ``axis``..end (no centring, no bias); ``scale`` broadcasts to x.shape[axis:]
    or is left out."""

    def __init__(self, axis: int = -1, eps: float = 1e-6):
        super().__init__()
        self.axis = axis
        self.eps = float(eps)

    def forward(self, x, scale=None):
        xp = array_module(x)
        inner = x.shape[self.axis :]
        x2 = x.reshape(-1, math.prod(inner))
        r = 1.0 / xp.sqrt((x2 * x2).mean(axis=1, keepdims=True) + self.eps)
        xhat = x2 * r.astype(x.dtype, copy=False)
        s2 = (
            None
            if scale is None
            else xp.broadcast_to(scale.astype(x.dtype, copy=False), inner).reshape(1, -1)
        )
        y = xhat if s2 is None else xhat * s2
        if self.requires_grad:
            self.cache = (xhat, r, s2, None if scale is None else scale.shape)
        return y.reshape(x.shape)

    def backward(self, dy):
        xhat, r, s2, sshape = self.cache
        dy2 = dy.reshape(xhat.shape)
        dx = dscale = None
        if sshape is not None and self.needs_grad[1]:
            dscale = unbroadcast((dy2 * xhat).sum(axis=0).reshape(dy.shape[self.axis :]), sshape)
        if self.needs_grad[0]:
            g = dy2 if s2 is None else dy2 * s2
            g = g - xhat * (g * xhat).mean(axis=1, keepdims=True)
            g *= r.astype(g.dtype, copy=False)
            dx = g.reshape(dy.shape)
        return (dx,) if sshape is None else (dx, dscale)


def rms_norm(x: Tensor, scale: Tensor | None = None, axis: int = -1, eps: float = 1e-6) -> Tensor:
    """Root-mean-square normalisation (ONNX RMSNormalization, PyTorch's ``rms_norm``):
    ``x / sqrt(mean(x^2 over axes axis..end) + eps) * scale``; ``scale`` has shape
    x.shape[axis:] (or broadcasts to it) or is None."""
    if x.data.dtype.kind != "f":
        check_same_dtype("rms_norm", x, floating=True)
    r = x.ndim()
    if not -r <= axis < r:
        raise ValueError(f"rms_norm: axis {axis} is out of range for x of shape {x.shape}")
    ax = axis + r if axis < 0 else axis
    if not eps >= 0:
        raise ValueError(f"rms_norm: eps must be >= 0, got {eps}")
    if scale is None:
        return RMSNorm(ax, eps)(x)[0]
    inner = tuple(x.shape[ax:])
    try:
        ok = np.broadcast_shapes(tuple(scale.shape), inner) == inner
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            f"rms_norm: scale of shape {scale.shape} does not fit x of shape {x.shape} at axis {axis}"
        )
    return RMSNorm(ax, eps)(x, scale)[0]
