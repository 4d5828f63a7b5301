"""Private helpers of the layers: creating parameters and buffers, adopting the first
input's device and dtype, and converting SINGA's padding forms (the rest of the
geometry is :mod:`singa.kernels.conv_geometry`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from singa import device as _device
from singa.kernels import conv_geometry as geo
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


def padding4(padding: Any, layer: str) -> tuple[int, int, int, int]:
    """A layer's ``padding`` argument as the operators' (top, left, bottom, right)
    (ONNX order), converted once, in the layer's constructor.

    Accepts an int, a pair (ph, pw), or SINGA's 4-tuple (top, bottom, left, right)."""
    size = len(padding) if isinstance(padding, list | tuple) else None
    if size == 4:
        top, bottom, left, right = padding
        padding = (top, left, bottom, right)
    elif size != 2 and not isinstance(padding, int | np.integer):
        raise TypeError(
            f"{layer}: padding must be an int, (ph, pw) or (top, bottom, left, right), got {padding!r}"
        )
    return geo.pads4(padding, layer)


PAD_MODES = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def check_pad_mode(pad_mode: str, layer: str) -> str:
    """``pad_mode`` upper-cased, or ValueError naming the allowed values."""
    m = str(pad_mode).upper()
    if m not in PAD_MODES:
        raise ValueError(f"{layer}: pad_mode must be one of {PAD_MODES}, got {pad_mode!r}")
    return m
