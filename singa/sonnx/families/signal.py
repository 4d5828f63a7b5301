"""Signal processing: ONNX DFT and STFT (built of autograd operators: the transform
along an axis is a product with constant cosine and sine matrices, so it is
differentiable), and the window functions HannWindow, HammingWindow, BlackmanWindow
(constants computed when the node runs).

Complex values are ONNX's: a trailing axis of 2 (real, imaginary); real signals
have a trailing axis of 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa import autograd
from singa.autograd import elementwise as ew
from singa.autograd import indexing as ix
from singa.autograd import linalg
from singa.autograd import shaping as sh
from singa.sonnx.context import NodeContext, builds, np_dtype
from singa.tensor import Tensor

_DFT_OPS = (sh.Transpose, sh.Slice, sh.Squeeze, sh.Pad, linalg.MatMul, ew.Add, ew.Sub, sh.Unsqueeze, sh.Cat)


def _fit(ctx: NodeContext, t: Tensor, n: int) -> Tensor:
    """``t`` cut or zero-padded to length ``n`` on its last axis."""
    have = t.shape[-1]
    if have > n:
        return autograd.slice(t, [0], [n], [t.ndim() - 1])
    if have < n:
        pads = [0] * (2 * t.ndim())
        pads[-1] = n - have
        return autograd.pad(t, "constant", pads)
    return t


def dft(ctx: NodeContext, x: Tensor, n: int, axis: int, inverse: bool, onesided: bool) -> Tensor:
    """The discrete Fourier transform of ``x`` (..., 1 or 2) along ``axis`` at length
    ``n`` (inverse: divided by n; onesided: the first n // 2 + 1 frequencies)."""
    r = x.ndim()
    axis %= r
    perm = [a for a in range(r - 1) if a != axis] + [axis, r - 1]
    t = autograd.transpose(x, perm)  # (..., L, c)
    last = t.ndim() - 1
    parts = [autograd.squeeze(autograd.slice(t, [i], [i + 1], [last]), [last]) for i in range(t.shape[-1])]
    parts = [_fit(ctx, p, n) for p in parts]
    k = n // 2 + 1 if onesided else n
    angle = 2 * np.pi * np.outer(np.arange(k), np.arange(n)) / n
    scale = 1.0 / n if inverse else 1.0
    cos_t = ctx.const((np.cos(angle) * scale).T, x.dtype)
    sin_t = ctx.const((np.sin(angle) * scale).T, x.dtype)
    re_part = autograd.matmul(parts[0], cos_t)
    im_part = autograd.matmul(parts[0], sin_t)
    if inverse:  # e^{+i...}: Re = r cos - m sin, Im = m cos + r sin
        re, im = re_part, im_part
        if len(parts) > 1:
            re = ew.sub(re, autograd.matmul(parts[1], sin_t))
            im = ew.add(im, autograd.matmul(parts[1], cos_t))
    else:  # e^{-i...}: Re = r cos + m sin, Im = m cos - r sin
        re, im = re_part, ew.sub(ctx.const(np.zeros((), x.dtype)), im_part) if len(parts) == 1 else None
        if len(parts) > 1:
            re = ew.add(re, autograd.matmul(parts[1], sin_t))
            im = ew.sub(autograd.matmul(parts[1], cos_t), im_part)
    y = autograd.cat([autograd.unsqueeze(re, [last]), autograd.unsqueeze(im, [last])], last)
    return autograd.transpose(y, list(np.argsort(perm)))


def irfft(ctx: NodeContext, x: Tensor, n: int, axis: int) -> Tensor:
    """The real signal of length ``n`` whose one-sided spectrum (n // 2 + 1 values of
    ``x`` (..., 2) along ``axis``) is given (numpy's irfft); shape (..., n, 1)."""
    r = x.ndim()
    axis %= r
    perm = [a for a in range(r - 1) if a != axis] + [axis, r - 1]
    t = autograd.transpose(x, perm)
    last = t.ndim() - 1
    m = n // 2 + 1
    parts = [
        _fit(ctx, autograd.squeeze(autograd.slice(t, [i], [i + 1], [last]), [last]), m)
        for i in range(t.shape[-1])
    ]
    weight = np.full(m, 2.0)
    weight[0] = 1.0
    if n % 2 == 0:
        weight[-1] = 1.0
    angle = 2 * np.pi * np.outer(np.arange(m), np.arange(n)) / n
    y = autograd.matmul(parts[0], ctx.const(weight[:, None] * np.cos(angle) / n, x.dtype))
    if len(parts) > 1:
        y = ew.sub(y, autograd.matmul(parts[1], ctx.const(weight[:, None] * np.sin(angle) / n, x.dtype)))
    y = autograd.unsqueeze(y, [last])
    return autograd.transpose(y, list(np.argsort(perm)))


@builds(*_DFT_OPS)
def handle_dft(ctx: NodeContext, xs: list) -> Tensor:
    """DFT(input, dft_length, axis) with ``inverse`` and ``onesided`` (the axis an
    attribute, default 1, before opset 20; an input, default -2, from 20)."""
    x = xs[0]
    if ctx.opset >= 20:
        axis = int(ctx.static(xs[2]).reshape(())) if len(xs) > 2 and xs[2] is not None else -2
    else:
        axis = int(ctx.attr("axis", 1))
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    given = len(xs) > 1 and xs[1] is not None
    if inverse and onesided:
        n = int(ctx.static(xs[1]).reshape(())) if given else 2 * (x.shape[axis % x.ndim()] - 1)
        return irfft(ctx, x, n, axis)
    n = int(ctx.static(xs[1]).reshape(())) if given else x.shape[axis % x.ndim()]
    return dft(ctx, x, n, axis, inverse, onesided)


@builds(ix.Gather, ew.Mul, sh.Reshape, *_DFT_OPS)
def handle_stft(ctx: NodeContext, xs: list) -> Tensor:
    """STFT(signal, frame_step, window, frame_length) with ``onesided``: frames of the
    signal (batch, length, 1 or 2), weighted by the window, each transformed."""
    x = xs[0]
    step = int(ctx.static(xs[1]).reshape(()))
    window = xs[2] if len(xs) > 2 and xs[2] is not None else None
    if len(xs) > 3 and xs[3] is not None:
        length = int(ctx.static(xs[3]).reshape(()))
    else:
        length = window.shape[0] if window is not None else x.shape[-2]
    frames = 1 + (x.shape[1] - length) // step
    idx = np.arange(frames)[:, None] * step + np.arange(length)[None, :]
    framed = autograd.gather(x, 1, ctx.const(idx.astype(np.int64)))  # (batch, frames, length, c)
    if window is not None:
        framed = ew.mul(framed, autograd.reshape(window, (1, 1, length, 1)))
    return dft(ctx, framed, length, 2, False, bool(ctx.attr("onesided", 1)))


def _window_handler(terms: tuple, what: str):
    @builds()
    def handle(ctx: NodeContext, xs: list) -> Tensor:
        size = int(ctx.static(xs[0]).reshape(()))
        n = size if int(ctx.attr("periodic", 1)) else size - 1
        k = np.arange(size, dtype=np.float64)
        w = sum(c * np.cos(2 * np.pi * i * k / n) for i, c in enumerate(terms)) if n > 0 else np.ones(size)
        return ctx.const(w.astype(np_dtype(ctx, int(ctx.attr("output_datatype", 1)))))

    handle.__doc__ = f"{what}(size) with ``periodic`` and ``output_datatype``: sum of c_i cos(2 pi i n / N)."
    return handle


def _mel(hz: Any) -> Any:
    """Hertz to mels: 2595 log10(1 + f / 700)."""
    return 2595 * np.log1p(hz / 700) / np.log(10)


@builds()
def handle_mel_weight_matrix(ctx: NodeContext, xs: list) -> Tensor:
    """MelWeightMatrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
    upper_edge_hertz; output_datatype): the (dft_length // 2 + 1, num_mel_bins) matrix of
    triangular filters, their edges spaced evenly on the mel scale (2595 log10(1 + f /
    700)) and rounded down to DFT bins, as ONNX's reference computes them."""
    bins, n, rate = (int(np.asarray(ctx.static(x)).reshape(())) for x in xs[:3])
    low, high = (float(np.asarray(ctx.static(x)).reshape(())) for x in xs[3:5])
    step = (_mel(high) - _mel(low)) / (bins + 2)
    hz = 700 * np.expm1((np.arange(bins + 2) * step + _mel(low)) / 2595 * np.log(10))
    edges = ((n + 1) * hz // rate).astype(np.int64)
    out = np.zeros((n // 2 + 1, bins))
    j = np.arange(n // 2 + 1)
    for i in range(bins):
        lo, mid, hi = edges[i : i + 3]
        if mid == lo:
            out[mid, i] = 1
        else:
            rising = (j >= lo) & (j <= mid)
            out[rising, i] = (j[rising] - lo) / (mid - lo)
        if hi > mid:
            falling = (j >= mid) & (j < hi)
            out[falling, i] = (hi - j[falling]) / (hi - mid)
    return ctx.const(out.astype(np_dtype(ctx, int(ctx.attr("output_datatype", 1)))))


EXPORT: dict = {}
IMPORT = {
    "DFT": handle_dft,
    "STFT": handle_stft,
    "HannWindow": _window_handler((0.5, -0.5), "HannWindow"),
    "HammingWindow": _window_handler((25 / 46, -(1 - 25 / 46)), "HammingWindow"),
    "BlackmanWindow": _window_handler((0.42, -0.5, 0.08), "BlackmanWindow"),
    "MelWeightMatrix": handle_mel_weight_matrix,
}
