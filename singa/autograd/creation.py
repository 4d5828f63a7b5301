"""Operators that make tensors from shapes: ``shape`` (ONNX Shape) and
``constant_of_shape`` (ONNX ConstantOfShape). Neither is differentiable.

Example::

    s = autograd.shape(x)                          # int64 tensor [N, C, H, W]
    z = autograd.constant_of_shape(s, 0.5)         # float32 tensor of x's shape, all 0.5
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa import device
from singa.autograd.engine import Operation
from singa.device import array_module
from singa.tensor import Tensor

__all__ = ["shape", "constant_of_shape", "Shape", "ConstantOfShape"]


class Shape(Operation):
    """y = x's shape as a 1-D int64 array; x gets no gradient."""

    def forward(self, x):
        return array_module(x).asarray(x.shape, dtype=np.int64)

    def backward(self, dy):
        return None


class ConstantOfShape(Operation):
    """y = an array of shape ``x`` (a 1-D integer array) filled with ``value`` (a numpy
    scalar, whose dtype the output takes); not differentiable."""

    def __init__(self, value: Any = 0.0):
        super().__init__()
        self.value = value if isinstance(value, np.generic) else np.float32(value)

    def forward(self, x):
        dims = tuple(int(d) for d in x.tolist())
        return array_module(x).full(dims, self.value, dtype=self.value.dtype)

    def backward(self, dy):
        return None


def shape(x: Tensor) -> Tensor:
    """The shape of ``x`` as a 1-D int64 tensor (ONNX Shape; SINGA's ``autograd.shape``)."""
    return Shape()(x)[0]


def constant_of_shape(x: Tensor | Any, value: Any = 0) -> Tensor:
    """A tensor of shape ``x`` (a 1-D tensor of non-negative integers, or a list of
    them) filled with ``value``: a Python number gives float32 (SINGA's and ONNX's
    default), a numpy scalar or one-element array keeps its dtype."""
    if not isinstance(x, Tensor):
        x = Tensor.wrap(np.asarray(x, dtype=np.int64), device.get_default_device())
    dims = np.asarray(x.to_numpy())
    if (
        dims.ndim != 1
        or dims.dtype.kind not in "iuf"
        or (dims < 0).any()
        or (dims != dims.astype(np.int64)).any()
    ):
        raise ValueError(
            f"constant_of_shape: x must be a 1-D tensor of non-negative integers, got {dims.tolist()}"
        )
    v = np.asarray(value)
    if v.size != 1:
        raise ValueError(f"constant_of_shape: value must be one number, got {v.tolist()}")
    v = v.reshape(()).astype(v.dtype)[()] if isinstance(value, np.ndarray | np.generic) else np.float32(value)
    return ConstantOfShape(v)(x)[0]
