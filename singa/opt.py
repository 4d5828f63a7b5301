"""Optimizers. (SGD for now; the full set comes with the Model API.)"""

from __future__ import annotations

from typing import Any

from singa.tensor import Tensor


class SGD:
    """Stochastic gradient descent with PyTorch's formulas.

    g = grad + weight_decay * p;  buf = momentum * buf + (1 - dampening) * g
    (buf = g on the first step);  g = g + momentum * buf if nesterov else buf;
    p -= lr * g.
    """

    def __init__(
        self,
        lr: float = 0.1,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ):
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise ValueError(
                f"SGD: lr, momentum and weight_decay must be >= 0, got {lr}, {momentum}, {weight_decay}"
            )
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: nesterov needs momentum > 0 and dampening = 0")
        self.lr = lr
        self.momentum = momentum
        self.dampening = dampening
        self.weight_decay = weight_decay
        self.nesterov = nesterov
        self.moments: dict[Any, Any] = {}

    def update(self, param: Tensor, grad: Tensor) -> None:
        """Update ``param`` in place from its gradient."""
        p, g = param.data, grad.data
        if self.weight_decay:
            g = g + self.weight_decay * p
        if self.momentum:
            buf = self.moments.get(param)
            if buf is None:
                buf = self.moments[param] = g.copy()
            else:
                buf *= self.momentum
                buf += (1 - self.dampening) * g
            g = g + self.momentum * buf if self.nesterov else buf
        p -= self.lr * g
