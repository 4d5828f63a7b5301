"""Operations the importer needs that the autograd families do not provide:
dtype casts and the error function."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from singa.autograd import activation
from singa.autograd.engine import Operation, array_module
from singa.tensor import Tensor

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


class Cast(Operation):
    """y = x converted to ``dtype``; the gradient is cast back (floats only)."""

    def __init__(self, dtype: Any):
        super().__init__()
        self.dtype = np.dtype(dtype)

    def forward(self, x):
        if self.requires_grad:
            self.cache = x.dtype
        return x.astype(self.dtype)

    def backward(self, dy):
        src = self.cache
        return dy.astype(src) if src.kind == "f" else None


def cast(x: Tensor, dtype: Any) -> Tensor:
    """``x`` converted to ``dtype`` (differentiable between floating types)."""
    if x.dtype == np.dtype(dtype):
        return x
    return Cast(dtype)(x)[0]


class Erf(Operation):
    """y = erf(x); dy/dx = 2 / sqrt(pi) * exp(-x^2)."""

    def forward(self, x):
        if self.requires_grad:
            self.cache = x
        xc = x.astype(np.float32) if x.dtype.itemsize < 4 else x
        return activation.erf(xc).astype(x.dtype, copy=False)

    def backward(self, dy):
        x = self.cache
        return dy * (_TWO_OVER_SQRT_PI * array_module(x).exp(-(x * x)))


def erf(x: Tensor) -> Tensor:
    """The error function, elementwise."""
    return Erf()(x)[0]
