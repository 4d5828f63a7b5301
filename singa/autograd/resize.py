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

__all__ = ["upsample", "UpSample", "resample"]

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


# ----- resize: ONNX Resize's every form --------------------------------------------------------
_COORDS = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
)
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _source_coords(ctm: str, n_in: int, n_out: int, scale: float, roi: tuple) -> tuple[np.ndarray, Any]:
    """The input coordinate of each output position, and (tf_crop_and_resize only) the
    positions that fall outside the input."""
    y = np.arange(n_out, dtype=np.float64)
    width = scale * n_in
    outside = None
    if ctm == "align_corners":
        x = np.zeros(n_out) if width == 1 else y * (n_in - 1) / (width - 1)
    elif ctm == "asymmetric":
        x = y / scale
    elif ctm == "tf_crop_and_resize":
        lo, hi = roi
        x = (
            np.full(n_out, (hi - lo) * (n_in - 1) / 2)
            if width == 1
            else y * (hi - lo) * (n_in - 1) / (width - 1)
        )
        x = x + lo * (n_in - 1)
        outside = (x < 0) | (x > n_in - 1)
    elif ctm == "pytorch_half_pixel":
        x = np.full(n_out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    else:  # half_pixel_symmetric
        x = n_in / 2 * (1 - n_out / width) + (y + 0.5) / scale - 0.5
    return x, outside


def _cubic(t: np.ndarray, a: float) -> np.ndarray:
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _coeffs(mode: str, ratio: np.ndarray, scale: float, opts: dict) -> np.ndarray:
    """(n_out, taps) interpolation coefficients for the fractional positions ``ratio``
    in (0, 1] (ONNX's reference kernels)."""
    r = ratio[:, None]
    if mode == "nearest":
        rule = opts["nearest_mode"]
        whole = (ratio == 1.0)[:, None]
        hi = {"round_prefer_floor": r > 0.5, "round_prefer_ceil": r >= 0.5, "floor": r < 0, "ceil": r >= 0}[
            rule
        ]
        hi = hi | whole
        return np.concatenate([~hi, hi], axis=1).astype(np.float64)
    if not opts["antialias"]:
        if mode == "linear":
            return np.concatenate([1 - r, r], axis=1)
        offsets = np.array([-1.0, 0.0, 1.0, 2.0])
        return _cubic(offsets[None, :] - r, opts["cubic_coeff_a"])
    s = min(scale, 1.0)
    reach = 1.0 if mode == "linear" else 2.0
    start = int(np.floor(-reach / s) + 1)
    taps = np.arange(start, 2 - start if mode == "cubic" else start + 2 - 2 * start, dtype=np.float64)
    args = (taps[None, :] - r) * s
    w = np.clip(1 - np.abs(args), 0, 1) if mode == "linear" else _cubic(args, opts["cubic_coeff_a"])
    return w / w.sum(axis=1, keepdims=True)


def resize_weights(mode: str, n_in: int, n_out: int, scale: float, opts: dict, roi: tuple = (0.0, 1.0)):
    """The (n_out, n_in) float64 matrix resampling one axis as ONNX Resize does, and the
    boolean rows that take ``extrapolation_value`` instead (None when there are none)."""
    x, outside = _source_coords(opts["coordinate_transformation_mode"], n_in, n_out, scale, roi)
    xi = np.floor(x)
    ratio = np.where(x == xi, 1.0, x - xi)
    c = _coeffs(mode, ratio, scale, opts)
    n = c.shape[1]
    pad = int(np.ceil(n / 2))
    xp_ = x + pad
    p = np.floor(xp_).astype(np.int64)
    frac = xp_ - p
    if n % 2 == 0:
        off = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        off = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    idx = (p + off)[:, None] + np.arange(n)[None, :] - pad
    if opts["exclude_outside"]:
        c = np.where((idx < 0) | (idx >= n_in), 0.0, c)
        total = c.sum(axis=1, keepdims=True)
        c = c / np.where(total == 0, 1.0, total)
    w = np.zeros((n_out, n_in))
    np.add.at(w, (np.repeat(np.arange(n_out), n), np.clip(idx, 0, n_in - 1).reshape(-1)), c.reshape(-1))
    if outside is not None and outside.any():
        w[outside] = 0.0
        return w, outside
    return w, None


class Resample(Operation):
    """y = x resampled to ``sizes`` as ONNX Resize does (any mode, coordinate transform,
    rounding, cubic coefficient, antialias, region of interest): each axis whose size
    or region changes is multiplied by its (out, in) matrix from
    :func:`resize_weights`; rows outside a tf_crop_and_resize region take
    ``extrapolation_value``. The gradient applies the transposed matrices."""

    def __init__(
        self, mode: str, sizes: Sequence[int], scales: Sequence[float], roi: Sequence[float], opts: dict
    ):
        super().__init__()
        self.mode = mode
        self.sizes = tuple(int(s) for s in sizes)
        self.scales = tuple(float(s) for s in scales)
        self.roi = tuple(float(r) for r in roi)
        self.opts = dict(opts)

    def plan(self, shape: tuple) -> list:
        """(axis, matrix, extrapolated rows) of every axis that changes."""
        r = len(shape)
        out = []
        for axis, (n, m, s) in enumerate(zip(shape, self.sizes, self.scales)):
            roi = (self.roi[axis], self.roi[axis + r]) if self.roi else (0.0, 1.0)
            if n == m and s == 1.0 and roi == (0.0, 1.0):
                continue
            w, rows = resize_weights(self.mode, n, m, s, self.opts, roi)
            out.append((axis, w, rows))
        return out

    def forward(self, x):
        xp = array_module(x)
        dt = x.dtype if x.dtype.kind == "f" else np.float64
        plan = self.plan(x.shape)
        y = x.astype(dt)
        for axis, w, rows in plan:
            y = _apply(xp, xp.asarray(w, dtype=dt), y, axis)
            if rows is not None:
                mask = xp.asarray(rows).reshape((-1,) + (1,) * (y.ndim - axis - 1))
                y = xp.where(mask, xp.asarray(self.opts["extrapolation_value"], dtype=dt), y)
        if self.requires_grad:
            self.cache = plan
        if x.dtype.kind != "f":
            info = np.iinfo(x.dtype) if x.dtype.kind in "iu" else None
            y = xp.rint(y) if info is None else xp.clip(xp.rint(y), info.min, info.max)
            return y.astype(x.dtype)
        return y if plan else x.copy()

    def backward(self, dy):
        xp = array_module(dy)
        g = dy
        for axis, w, rows in reversed(self.cache):
            if rows is not None:
                mask = xp.asarray(rows).reshape((-1,) + (1,) * (g.ndim - axis - 1))
                g = xp.where(mask, 0, g)
            g = _apply(xp, xp.asarray(w.T, dtype=dy.dtype), g, axis)
        return g


def _check_options(mode: str, ctm: str, nearest_mode: str, antialias: bool) -> None:
    """ValueError naming the first option of :func:`resample` out of its range."""
    if mode not in ("nearest", "linear", "cubic"):
        raise ValueError(f"resample: mode must be 'nearest', 'linear' or 'cubic', got {mode!r}")
    if ctm not in _COORDS:
        raise ValueError(f"resample: coordinate_transformation_mode must be one of {_COORDS}, got {ctm!r}")
    if nearest_mode not in _NEAREST:
        raise ValueError(f"resample: nearest_mode must be one of {_NEAREST}, got {nearest_mode!r}")
    if antialias and mode == "nearest":
        raise ValueError("resample: antialias applies to linear and cubic modes only")


def _sizes_scales(shape: tuple, sizes: Any, scales: Any) -> tuple[list, list]:
    """Output sizes and coordinate scales from either or both (see :func:`resample`)."""
    r = len(shape)
    if sizes is None and scales is None:
        raise ValueError("resample: give sizes or scales")
    if scales is not None:
        scales = [float(s) for s in scales]
        if len(scales) != r or any(not s > 0 for s in scales):
            raise ValueError(f"resample: needs one positive scale per axis of shape {shape}, got {scales}")
    if sizes is None:
        sizes = [int(math.floor(n * s)) for n, s in zip(shape, scales)]
    sizes = [int(s) for s in sizes]
    if len(sizes) != r or any(s < 0 for s in sizes):
        raise ValueError(f"resample: needs one size >= 0 per axis of shape {shape}, got {sizes}")
    if scales is None:
        scales = [m / n if n else 1.0 for m, n in zip(sizes, shape)]
    return sizes, scales


def resample(
    x: Tensor,
    sizes: Sequence[int] | None = None,
    scales: Sequence[float] | None = None,
    mode: str = "nearest",
    coordinate_transformation_mode: str = "half_pixel",
    nearest_mode: str = "round_prefer_floor",
    cubic_coeff_a: float = -0.75,
    exclude_outside: bool = False,
    antialias: bool = False,
    roi: Sequence[float] | None = None,
    extrapolation_value: float = 0.0,
) -> Tensor:
    """ONNX Resize: ``x`` resampled to ``sizes`` (one per axis) or by ``scales`` (the
    output axis floor(n * scale) long; given both, ``scales`` map the coordinates, as
    under ONNX's keep_aspect_ratio_policy). ``mode`` "nearest", "linear" or "cubic";
    ``coordinate_transformation_mode`` one of half_pixel, half_pixel_symmetric,
    pytorch_half_pixel, align_corners, asymmetric, tf_crop_and_resize (whose ``roi``
    gives start..., end... per axis as fractions and whose outside rows take
    ``extrapolation_value``). Differentiable for floating ``x``.

    PyTorch's ``F.interpolate(x, size, mode="bilinear", align_corners=False)`` is
    ``resample(x, sizes, mode="linear", coordinate_transformation_mode="pytorch_half_pixel")``."""
    mode = str(mode).lower()
    _check_options(mode, coordinate_transformation_mode, nearest_mode, antialias)
    r = x.ndim()
    sizes, scales = _sizes_scales(tuple(x.shape), sizes, scales)
    roi = [float(v) for v in roi] if roi is not None and len(roi) else []
    if coordinate_transformation_mode == "tf_crop_and_resize" and len(roi) != 2 * r:
        raise ValueError(f"resample: tf_crop_and_resize needs a roi of {2 * r} values, got {roi}")
    if coordinate_transformation_mode != "tf_crop_and_resize":
        roi = []
    opts = {
        "coordinate_transformation_mode": coordinate_transformation_mode,
        "nearest_mode": nearest_mode,
        "cubic_coeff_a": float(cubic_coeff_a),
        "exclude_outside": bool(exclude_outside),
        "antialias": bool(antialias),
        "extrapolation_value": float(extrapolation_value),
    }
    return Resample(mode, sizes, scales, roi, opts)(x)[0]
