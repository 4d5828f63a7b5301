"""Private helpers of the layers: creating parameters and buffers, adopting the first
input's device and dtype, and argument normalisation."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from singa import device as _device
from singa.autograd import _im2col
from singa.tensor import Tensor


def float_dtype(x: Tensor | None) -> Any:
    """The dtype parameters take for input ``x``: its own when floating, else float32."""
    if x is None or np.dtype(x.dtype).kind != "f":
        return np.dtype(np.float32)
    return np.dtype(x.dtype)


def new_param(shape: tuple, x: Tensor | None = None) -> Tensor:
    """A trainable parameter (requires_grad and stores_grad) of zeros, on ``x``'s
    device with ``x``'s float dtype (the default device and float32 without ``x``)."""
    dev = x.device if x is not None else _device.get_default_device()
    return Tensor(tuple(shape), dev, float_dtype(x), requires_grad=True, stores_grad=True)


def new_buffer(shape: tuple, x: Tensor | None = None, value: float = 0.0) -> Tensor:
    """A non-trainable state tensor (requires_grad False) filled with ``value``."""
    dev = x.device if x is not None else _device.get_default_device()
    t = Tensor(tuple(shape), dev, float_dtype(x), requires_grad=False)
    if value:
        t.set_value(value)
    return t


def adopt(tensors: Iterable[Tensor | None], x: Tensor) -> None:
    """Move eagerly created state tensors to ``x``'s device and float dtype.

    Used once, on a layer's first call, before any graph or optimizer has seen the
    tensors (so replacing their arrays is safe)."""
    dtype = float_dtype(x)
    for t in tensors:
        if t is None:
            continue
        if t.device is not x.device:
            t.to_device(x.device)
        if t.dtype != dtype:
            t.data = t.data.astype(dtype)


def pair(v: Any, name: str, layer: str) -> tuple[int, int]:
    """An int or a pair of ints as a pair."""
    if isinstance(v, int | np.integer):
        return int(v), int(v)
    if isinstance(v, list | tuple) and len(v) == 2:
        return int(v[0]), int(v[1])
    raise TypeError(f"{layer}: {name} must be an int or a pair of ints, got {v!r}")


def same_pads(pad_mode: str, in_hw: tuple, kernel: tuple, stride: tuple, dilation: tuple = (1, 1)) -> tuple:
    """ONNX auto_pad SAME_UPPER / SAME_LOWER: pads (top, left, bottom, right) giving an
    output of ceil(in / stride); the odd pixel goes at the end (UPPER) or begin (LOWER)."""
    begin, end = _im2col.same_pads(pad_mode, in_hw, kernel, stride, dilation)
    return begin[0], begin[1], end[0], end[1]


def padding4(padding: Any, layer: str) -> tuple[int, int, int, int]:
    """A layer's ``padding`` argument as the operators' (top, left, bottom, right).

    Accepts an int, a pair (ph, pw), or SINGA's 4-tuple (top, bottom, left, right)."""
    if isinstance(padding, int | np.integer):
        p = int(padding)
        return p, p, p, p
    if isinstance(padding, list | tuple):
        if len(padding) == 2:
            ph, pw = int(padding[0]), int(padding[1])
            return ph, pw, ph, pw
        if len(padding) == 4:
            top, bottom, left, right = (int(v) for v in padding)
            return top, left, bottom, right
    raise TypeError(
        f"{layer}: padding must be an int, (ph, pw) or (top, bottom, left, right), got {padding!r}"
    )


PAD_MODES = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def check_pad_mode(pad_mode: str, layer: str) -> str:
    """``pad_mode`` upper-cased, or ValueError naming the allowed values."""
    m = str(pad_mode).upper()
    if m not in PAD_MODES:
        raise ValueError(f"{layer}: pad_mode must be one of {PAD_MODES}, got {pad_mode!r}")
    return m
