"""Geometry of windowed operators (convolution, transposed convolution, pooling).

One convention holds below the layer boundary: padding is given in ONNX ``pads``
order, all begins then all ends (``(top, left, bottom, right)`` for two spatial
axes, ``(begin, end)`` for one). Layers convert SINGA's forms (its 4-tuple is
``(top, bottom, left, right)``) once, in their constructor; the operators, the
layers and the ONNX converters all use the helpers here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["ints", "pair", "pads", "pads4", "out_size", "same_pads"]


def ints(v: Any, nd: int, name: str, owner: str, minimum: int = 1) -> tuple[int, ...]:
    """``v`` (an int, or ``nd`` ints: one per spatial axis) as ``nd`` ints >= ``minimum``.

    Raises ValueError naming ``owner`` and ``name`` otherwise."""
    if isinstance(v, int | np.integer):
        t = (int(v),) * nd
    elif isinstance(v, list | tuple):
        t = tuple(int(a) for a in v)
    else:
        raise TypeError(f"{owner}: {name} must be an int or {nd} ints, got {v!r}")
    if len(t) != nd:
        raise ValueError(
            f"{owner}: {name} must be an int or {nd} ints >= {minimum} (one per spatial axis), got {v!r}"
        )
    if min(t) < minimum:
        raise ValueError(f"{owner}: {name} must be >= {minimum}, got {v!r}")
    return t


def pair(v: Any, name: str, owner: str, minimum: int = 1) -> tuple[int, int]:
    """``v`` (an int or a pair) as a pair of ints >= ``minimum``."""
    return ints(v, 2, name, owner, minimum)  # type: ignore[return-value]


def pads(padding: Any, nd: int, owner: str, allow_negative: bool = False) -> tuple[int, ...]:
    """Padding in ONNX order (``nd`` begins, then ``nd`` ends) from an int (every
    side), ``nd`` ints (both sides of each axis) or ``2 * nd`` ints (ONNX order).
    Negative entries (cropping) raise ValueError unless ``allow_negative``."""
    if isinstance(padding, int | np.integer):
        p = (int(padding),) * (2 * nd)
    else:
        p = tuple(int(a) for a in padding)
        if len(p) == nd:
            p = p + p
        elif len(p) != 2 * nd:
            raise ValueError(
                f"{owner}: padding must be an int, {nd} ints or {2 * nd} ints "
                f"(ONNX pads order: all begins, then all ends), got {padding!r}"
            )
    if min(p) < 0 and not allow_negative:
        raise ValueError(f"{owner}: padding must be >= 0, got {padding!r}")
    return p


def pads4(padding: Any, owner: str) -> tuple[int, int, int, int]:
    """Two-axis padding as (top, left, bottom, right), ONNX ``pads`` order
    [h_begin, w_begin, h_end, w_end], from an int, (ph, pw) or a 4-tuple."""
    return pads(padding, 2, owner)  # type: ignore[return-value]


def out_size(n: int, k: int, s: int, p0: int, p1: int, d: int = 1, ceil_mode: bool = False) -> int:
    """Output length along one axis (PyTorch/ONNX rule; with ``ceil_mode`` the
    last window must start inside the input plus its begin padding)."""
    span = n + p0 + p1 - d * (k - 1) - 1
    if span < 0:
        return 0
    if not ceil_mode:
        return span // s + 1
    o = -(-span // s) + 1
    if (o - 1) * s >= n + p0:
        o -= 1
    return o


def same_pads(mode: str, sizes: Any, kernel: Any, stride: Any, dilation: Any) -> tuple[int, ...]:
    """ONNX ``auto_pad`` SAME_UPPER / SAME_LOWER: the pads (ONNX order: all begins,
    then all ends) giving an output of ceil(size / stride) along each spatial axis;
    the odd cell goes at the end (UPPER) or the beginning (LOWER)."""
    begin, end = [], []
    for n, k, s, d in zip(sizes, kernel, stride, dilation):
        out = -(-n // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
        small, big = total // 2, total - total // 2
        begin.append(small if mode == "SAME_UPPER" else big)
        end.append(big if mode == "SAME_UPPER" else small)
    return tuple(begin + end)
