"""Dropout: zero random elements while training, scaling the kept ones."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.autograd.engine import Operation, is_training
from singa.tensor import Tensor

__all__ = ["dropout"]


class Dropout(Operation):
    """y = x * mask / (1 - ratio), mask ~ Bernoulli(1 - ratio) drawn afresh on every
    ``forward`` from ``device.rng`` (so a graph replay draws a new mask); the identity
    when not ``training`` or ``ratio`` is 0.

    Apache SINGA scales by ``1 - ratio`` instead of ``1 / (1 - ratio)``; this is the
    usual inverted dropout, whose expectation equals the input.
    """

    def __init__(self, ratio: float = 0.5, training: bool = True, device: Any = None):
        super().__init__()
        self.ratio = float(ratio)
        self.training = bool(training)
        self.device = device

    def forward(self, x):
        if not self.training or self.ratio == 0.0:
            if self.requires_grad:
                self.cache = None
            return x.view()
        rdt = np.float64 if x.dtype == np.float64 else np.float32
        u = self.device.rng.random(x.shape, dtype=rdt)
        mask = (u >= self.ratio).astype(x.dtype)
        mask *= 1.0 / (1.0 - self.ratio)
        if self.requires_grad:
            self.cache = mask
        return x * mask

    def backward(self, dy):
        if self.cache is None:
            return dy
        return dy * self.cache

    def _backward_into_dy(self, dy):
        if self.cache is None:
            return dy
        dy *= self.cache
        return dy

    backward_inplace = ((_backward_into_dy, 0),)


def dropout(x: Tensor, ratio: float = 0.5, training: bool | None = None) -> Tensor:
    """Inverted dropout: while training (``training`` None means
    ``singa.autograd.training``) each element is zeroed with probability ``ratio``
    and the kept ones are scaled by ``1 / (1 - ratio)``; a fresh mask is drawn from
    ``x.device.rng`` on every call (``dev.set_rand_seed`` makes it reproducible).
    The identity when not training or ``ratio == 0``. ``ratio`` must be in [0, 1)."""
    if not 0.0 <= ratio < 1.0:
        raise ValueError(f"dropout: ratio must be in [0, 1), got {ratio}")
    if training is None:
        training = is_training()
    return Dropout(ratio, training, x.device)(x)[0]
