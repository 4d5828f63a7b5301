"""Loss functions. Each returns a tensor of shape (1,), as SINGA does, averaged over
the batch."""

from __future__ import annotations

from singa.autograd.engine import Operation, array_module
from singa.tensor import Tensor

__all__ = ["softmax_cross_entropy"]


def _is_index_target(x, t) -> bool:
    return t.ndim == x.ndim - 1


class SoftMaxCrossEntropy(Operation):
    """loss = mean over the batch of -sum(t * log_softmax(x)) along the last axis.

    ``t`` holds class indices (one fewer dimension than ``x``, any numeric dtype) or
    one-hot / soft labels (the same shape as ``x``).
    """

    def forward(self, x, t):
        xp = array_module(x)
        shifted = x - x.max(axis=-1, keepdims=True)
        e = xp.exp(shifted)
        s = e.sum(axis=-1, keepdims=True)
        logp = shifted - xp.log(s)
        n = x.size // x.shape[-1]
        if _is_index_target(x, t):
            idx = t.astype(xp.int64).reshape(-1)
            picked = logp.reshape(-1, x.shape[-1])[xp.arange(idx.size), idx]
            loss = -picked.sum() / n
        else:
            loss = -(t * logp).sum() / n
        if self.requires_grad:
            self.cache = (e / s, t)
        return xp.asarray(loss, dtype=x.dtype).reshape(1)

    def backward(self, dy):
        p, t = self.cache
        xp = array_module(p)
        n = p.size // p.shape[-1]
        if _is_index_target(p, t):
            g = p.reshape(-1, p.shape[-1]).copy()
            idx = t.astype(xp.int64).reshape(-1)
            g[xp.arange(idx.size), idx] -= 1
            g = g.reshape(p.shape)
        else:
            g = p - t
        g *= dy.reshape(()) / n
        return g, None


def softmax_cross_entropy(x: Tensor, t: Tensor) -> Tensor:
    """Cross-entropy of softmax(x) against class indices or (soft) one-hot targets ``t``."""
    if not (t.ndim() == x.ndim() - 1 and t.shape == x.shape[:-1]) and t.shape != x.shape:
        raise ValueError(
            f"softmax_cross_entropy: x of shape {x.shape} and target of shape {t.shape} do not match "
            "(the target holds class indices of shape x.shape[:-1] or labels of x's shape)"
        )
    return SoftMaxCrossEntropy()(x, t)[0]
