"""Resampling tensors along their axes: ``upsample`` (ONNX Upsample, opsets 7-9).

Each resized axis of size n becomes floor(n * scale) long; output position i reads
input coordinate ``i / scale`` (ONNX's "asymmetric" transform). "nearest" takes the
input element at floor(i / scale); "linear" interpolates between the two neighbours
of that coordinate (the last element repeats beyond the end); over several axes this
is bilinear, trilinear, ... interpolation.

Every axis is resampled by an (out, in) weight matrix, so the gradient is the
transposed matrix applied to ``dy``: each input element receives the sum of the
output gradients it was copied or blended into. Further coordinate transforms
(ONNX Resize) extend :func:`axis_weights`.

Example::

    y = autograd.upsample(x, "nearest", [1, 1, 2, 2])    # (N, C, H, W) -> (N, C, 2H, 2W)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from singa.autograd.engine import Operation
from singa.device import array_module
from singa.tensor import Tensor

__all__ = ["upsample", "UpSample"]

_MODES = ("nearest", "linear")


def source_index(n_in: int, n_out: int, scale: float) -> np.ndarray:
    """Input coordinate i / scale of each output position i (asymmetric)."""
    return np.arange(n_out, dtype=np.float64) / scale


def axis_weights(mode: str, n_in: int, n_out: int, scale: float) -> np.ndarray:
    """The (n_out, n_in) float64 matrix that resamples one axis."""
    src = source_index(n_in, n_out, scale)
    w = np.zeros((n_out, n_in))
    rows = np.arange(n_out)
    lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    if mode == "nearest":
        w[rows, lo] = 1.0
        return w
    hi = np.minimum(lo + 1, n_in - 1)
    frac = np.clip(src - lo, 0.0, 1.0)
    np.add.at(w, (rows, lo), 1.0 - frac)
    np.add.at(w, (rows, hi), frac)
    return w


def _apply(xp: Any, w: Any, a: Any, axis: int) -> Any:
    """``w`` (out, in) applied along ``axis`` of ``a``."""
    moved = xp.moveaxis(a, axis, -1)
    return xp.moveaxis(moved @ w.T, -1, axis)


class UpSample(Operation):
    """y = x resampled along each axis by ``scales`` (see the module docstring)."""

    def __init__(self, mode: str, scales: Sequence[float]):
        super().__init__()
        self.mode = mode.lower()
        self.scales = tuple(float(s) for s in scales)

    def _plan(self, shape: tuple) -> list:
        """(axis, n_in, n_out) of every axis that changes (or interpolates)."""
        out = []
        for axis, (n, s) in enumerate(zip(shape, self.scales)):
            if s != 1.0:
                out.append((axis, n, int(math.floor(n * s))))
        return out

    def forward(self, x):
        xp = array_module(x)
        plan = self._plan(x.shape)
        mats = []
        y = x
        for axis, n_in, n_out in plan:
            w = axis_weights(self.mode, n_in, n_out, self.scales[axis])
            if self.mode == "nearest":
                y = xp.take(y, xp.asarray(w.argmax(axis=1)), axis=axis)
            else:
                y = _apply(xp, xp.asarray(w, dtype=x.dtype), y, axis)
            mats.append(w)
        if not plan:
            y = x.copy()
        if self.requires_grad:
            self.cache = (plan, mats)
        return y

    def backward(self, dy):
        xp = array_module(dy)
        plan, mats = self.cache
        g = dy
        for (axis, _, _), w in zip(reversed(plan), reversed(mats)):
            g = _apply(xp, xp.asarray(w.T, dtype=dy.dtype), g, axis)
        return g


def upsample(x: Tensor, mode: str, scales: Sequence[float] | Any) -> Tensor:
    """Resample ``x`` (ONNX Upsample): ``scales`` holds one factor >= 1 per axis (the
    output axis is floor(n * scale) long); ``mode`` is "nearest" or "linear" (SINGA
    takes "nearest" only). Differentiable for floating ``x``."""
    scales = scales.to_numpy() if isinstance(scales, Tensor) else scales
    scales = [float(s) for s in np.asarray(scales, dtype=np.float64).reshape(-1)]
    mode = str(mode).lower()
    if mode not in _MODES:
        raise ValueError(f"upsample: mode must be 'nearest' or 'linear', got {mode!r}")
    if len(scales) != x.ndim() or any(not s >= 1.0 for s in scales):
        raise ValueError(f"upsample: needs one scale >= 1 per axis of shape {x.shape}, got {scales}")
    if mode == "linear" and x.dtype.kind != "f":
        raise ValueError(f"upsample: linear mode needs a floating-point tensor, got {x.dtype}")
    return UpSample(mode, scales)(x)[0]
