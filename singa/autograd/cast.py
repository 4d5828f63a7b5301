"""Cast: a differentiable change of floating-point dtype.

``cast(x, float16)`` returns x's values rounded to float16; its gradient is the
incoming gradient cast back to x's dtype. Mixed-precision training
(:mod:`singa.model.precision`) places these casts: float32 master weights to the
compute dtype once per step, and the inputs of the operators that must compute in
float32 up to float32.

Example::

    x16 = autograd.cast(x, tensor.float16)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.autograd.engine import Operation
from singa.tensor import Tensor

__all__ = ["Cast", "cast"]


class Cast(Operation):
    """y = x.astype(to); dx = dy.astype(x's dtype)."""

    def __init__(self, to: Any):
        super().__init__()
        self.to = np.dtype(to)

    def forward(self, x):
        if self.requires_grad:
            self.cache = x.dtype
        return x.astype(self.to)

    def backward(self, dy):
        return dy.astype(self.cache)


def cast(x: Tensor, dtype: Any) -> Tensor:
    """``x`` as a new Tensor of floating dtype ``dtype`` (differentiable; a copy even
    when the dtype is already ``dtype``)."""
    to = np.dtype(dtype)
    if to.kind != "f" or np.dtype(x.dtype).kind != "f":
        raise ValueError(f"cast: casts between floating dtypes only, got {x.dtype} to {to}")
    return Cast(to)(x)[0]
