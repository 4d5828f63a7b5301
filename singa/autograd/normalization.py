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

from singa.autograd._im2col import is_channels_last
from singa.autograd.engine import Operation, array_module, check_same_dtype, is_training, unbroadcast
from singa.autograd.linalg import ones_vector
from singa.tensor import Tensor

__all__ = ["batchnorm_2d", "layer_norm"]


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


class BatchNorm2d(Operation):
    """Batch normalization of x (N, C, ...) per channel C.

    Training: normalise with the batch mean and biased variance, and update the
    running statistics in place: ``running = momentum * running + (1 - momentum) *
    batch_stat`` (the running variance takes the unbiased batch variance). Eval:
    normalise with the running statistics (a plain per-channel affine map).
    """

    def __init__(self, momentum: float = 0.9, eps: float = 1e-5, training: bool = True):
        super().__init__()
        self.momentum = float(momentum)
        self.eps = float(eps)
        self.training = bool(training)

    def forward(self, x, scale, bias, running_mean, running_var):
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
            mom = self.momentum
            running_mean *= mom
            running_mean += (1.0 - mom) * m
            running_var *= mom
            running_var += ((1.0 - mom) * count / max(count - 1, 1)) * var
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

    def backward(self, dy):
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
        # the running statistics get no gradient: (dx, dscale, dbias), as SINGA returns
        return (
            dx,
            dscale.astype(scale.dtype, copy=False) if need_s else None,
            sdy.astype(scale.dtype, copy=False) if need_b else None,
        )


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
    ``y = xhat * scale + bias`` (scale and bias broadcast to x.shape[axis:])."""

    def __init__(self, axis: int = -1, eps: float = 1e-5):
        super().__init__()
        self.axis = axis
        self.eps = float(eps)

    def forward(self, x, scale, bias=None):
        xp = array_module(x)
        inner = x.shape[self.axis :]
        d = math.prod(inner)
        x2 = x.reshape(-1, d)
        ones = ones_vector(x2, d)
        m = (x2 @ ones) * (1.0 / d)
        xhat = x2 - m[:, None]
        var = ((xhat * xhat) @ ones) * (1.0 / d)
        invstd = (1.0 / xp.sqrt(var + self.eps))[:, None]
        xhat *= invstd
        s2 = xp.broadcast_to(scale.astype(x.dtype, copy=False), inner).reshape(1, d)
        y = xhat * s2
        if bias is not None:
            y += xp.broadcast_to(bias.astype(x.dtype, copy=False), inner).reshape(1, d)
        if self.requires_grad:
            self.cache = (xhat, invstd, s2, scale.shape, None if bias is None else bias.shape)
        return y.reshape(x.shape)

    def backward(self, dy):
        xhat, invstd, s2, sshape, bshape = self.cache
        r, d = xhat.shape
        inner = dy.shape[self.axis :]
        dy2 = dy.reshape(r, d)
        ones_r = ones_vector(dy2, r)
        dx = dscale = dbias = None
        if self.needs_grad[1]:
            dscale = unbroadcast((ones_r @ (dy2 * xhat)).reshape(inner), sshape)
        if bshape is not None and self.needs_grad[2]:
            dbias = unbroadcast((ones_r @ dy2).reshape(inner), bshape)
        if self.needs_grad[0]:
            ones_d = ones_vector(dy2, d)
            g = dy2 * s2
            mg = (g @ ones_d) * (1.0 / d)
            mgx = ((g * xhat) @ ones_d) * (1.0 / d)
            g -= mg[:, None]
            t = xhat * mgx[:, None]
            g -= t
            g *= invstd
            dx = g.reshape(dy.shape)
        return (dx, dscale) if bshape is None else (dx, dscale, dbias)


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
