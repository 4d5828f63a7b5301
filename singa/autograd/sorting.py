"""Sorting: the k largest (or smallest) entries along an axis (ONNX TopK).

``topk`` returns the values and their int64 indices; ties keep the lower index
first (ONNX's rule). The values are differentiable: each picked entry receives its
value's gradient.

Example::

    values, idx = autograd.topk(x, 3, axis=-1)            # the 3 largest per row
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.autograd.engine import Operation
from singa.autograd.shaping import check_axis
from singa.device import array_module
from singa.tensor import Tensor

__all__ = ["topk"]


def top_indices(xp: Any, a: Any, k: int, axis: int, largest: bool) -> Any:
    """The int64 indices of the ``k`` largest (smallest) entries along ``axis`` in
    order, ties broken towards the lower index (a stable sort)."""
    key = -a if largest else a
    if largest and a.dtype.kind == "u":
        key = a.max() - a if a.size else a
    if a.dtype.kind == "b":
        key = ~a if largest else a
    order = xp.argsort(key, axis=axis, kind="stable")
    return xp.take(order, xp.arange(k), axis=axis).astype(np.int64)


class TopK(Operation):
    """(values, indices) of the ``k`` largest (``largest``) or smallest entries along
    ``axis``, sorted; the gradient of x scatters dvalues to the picked positions."""

    def __init__(self, k: int, axis: int = -1, largest: bool = True):
        super().__init__()
        self.k = k
        self.axis = axis
        self.largest = largest

    def forward(self, x):
        xp = array_module(x)
        idx = top_indices(xp, x, self.k, self.axis, self.largest)
        if self.requires_grad:
            self.cache = (x.shape, idx)
        return xp.take_along_axis(x, idx, axis=self.axis), idx

    def backward(self, dvalues, dindices=None):
        shape, idx = self.cache
        xp = array_module(dvalues)
        dx = xp.zeros(shape, dtype=dvalues.dtype)
        xp.put_along_axis(dx, idx, dvalues, axis=self.axis)
        return dx


def topk(x: Tensor, k: int, axis: int = -1, largest: bool = True) -> tuple[Tensor, Tensor]:
    """The ``k`` largest (or, with ``largest=False``, smallest) entries of ``x`` along
    ``axis`` in order, and their int64 indices (ONNX TopK, sorted; ties: lower index
    first). PyTorch's ``torch.topk``."""
    ax = check_axis(axis, x.ndim(), "topk")
    k = int(k)
    if not 0 <= k <= x.shape[ax]:
        raise ValueError(f"topk: k={k} must be in 0..{x.shape[ax]} (the size of axis {axis} of {x.shape})")
    values, idx = TopK(k, ax, bool(largest))(x)
    return values, idx
