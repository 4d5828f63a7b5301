"""Comparisons and logic, elementwise with numpy broadcasting.

Every result is a boolean tensor (ONNX's, numpy's and PyTorch's type; SINGA, whose
tensors have no boolean type, returns 0.0/1.0 floats: use ``cast`` or any arithmetic
operator, which computes a boolean operand in the other operand's floating type, where
a float mask is wanted). Nothing here is differentiable: the inputs get no gradient
(None), as the outputs are piecewise constant.

The logic functions take any numeric dtype, nonzero meaning true (SINGA's rule; ONNX
And/Or/Xor/Not take booleans only, the exporter casts). A Python number or array may
stand for one operand of a binary function.

Example::

    mask = autograd.greater(x, 0.5)              # bool Tensor of x's shape
    both = autograd._and(mask, autograd.less(x, 2))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.autograd.engine import Operation
from singa.device import array_module
from singa.tensor import Tensor

__all__ = [
    "greater",
    "less",
    "equal",
    "greater_equal",
    "less_equal",
    "_and",
    "_or",
    "_xor",
    "_not",
    "Greater",
    "Less",
    "Equal",
    "GreaterEqual",
    "LessEqual",
    "And",
    "Or",
    "Xor",
    "Not",
]


class _Binary(Operation):
    """y = f(a, b) as booleans; neither input gets a gradient."""

    @staticmethod
    def f(xp: Any, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def forward(self, a, b):
        return self.f(array_module(a), a, b)

    def backward(self, dy):
        return None, None


class Greater(_Binary):
    """y = a > b."""

    f = staticmethod(lambda xp, a, b: xp.greater(a, b))


class Less(_Binary):
    """y = a < b."""

    f = staticmethod(lambda xp, a, b: xp.less(a, b))


class Equal(_Binary):
    """y = a == b (exact equality, also for floats)."""

    f = staticmethod(lambda xp, a, b: xp.equal(a, b))


class GreaterEqual(_Binary):
    """y = a >= b."""

    f = staticmethod(lambda xp, a, b: xp.greater_equal(a, b))


class LessEqual(_Binary):
    """y = a <= b."""

    f = staticmethod(lambda xp, a, b: xp.less_equal(a, b))


class And(_Binary):
    """y = a and b (nonzero is true)."""

    f = staticmethod(lambda xp, a, b: xp.logical_and(a, b))


class Or(_Binary):
    """y = a or b (nonzero is true)."""

    f = staticmethod(lambda xp, a, b: xp.logical_or(a, b))


class Xor(_Binary):
    """y = a xor b (nonzero is true)."""

    f = staticmethod(lambda xp, a, b: xp.logical_xor(a, b))


class Not(Operation):
    """y = not x (true where x is zero); x gets no gradient."""

    def forward(self, x):
        return array_module(x).logical_not(x)

    def backward(self, dy):
        return None


def _lift(v: Any, like: Tensor) -> Tensor:
    """A constant operand on ``like``'s device: in ``like``'s dtype unless that would
    change its value (0.5 against an integer tensor keeps its float type)."""
    xp = like.device.xp
    arr = np.asarray(v)
    if np.can_cast(arr.dtype, like.dtype, casting="same_kind") or (arr == arr.astype(like.dtype)).all():
        arr = arr.astype(like.dtype)
    return Tensor.wrap(xp.asarray(arr), like.device)


def _apply(op: type, name: str, a: Any, b: Any) -> Tensor:
    if not isinstance(a, Tensor):
        if not isinstance(b, Tensor):
            raise TypeError(f"{name}: at least one operand must be a Tensor")
        a = _lift(a, b)
    elif not isinstance(b, Tensor):
        b = _lift(b, a)
    try:
        np.broadcast_shapes(tuple(a.shape), tuple(b.shape))
    except ValueError:
        raise ValueError(f"{name}: shapes {a.shape} and {b.shape} cannot be broadcast together") from None
    return op()(a, b)[0]


def greater(x: Tensor | Any, y: Tensor | Any) -> Tensor:
    """x > y elementwise, as a boolean tensor."""
    return _apply(Greater, "greater", x, y)


def less(x: Tensor | Any, y: Tensor | Any) -> Tensor:
    """x < y elementwise, as a boolean tensor."""
    return _apply(Less, "less", x, y)


def equal(x: Tensor | Any, y: Tensor | Any) -> Tensor:
    """x == y elementwise (exact), as a boolean tensor."""
    return _apply(Equal, "equal", x, y)


def greater_equal(x: Tensor | Any, y: Tensor | Any) -> Tensor:
    """x >= y elementwise, as a boolean tensor (ONNX GreaterOrEqual)."""
    return _apply(GreaterEqual, "greater_equal", x, y)


def less_equal(x: Tensor | Any, y: Tensor | Any) -> Tensor:
    """x <= y elementwise, as a boolean tensor (ONNX LessOrEqual)."""
    return _apply(LessEqual, "less_equal", x, y)


def _and(a: Tensor | Any, b: Tensor | Any) -> Tensor:
    """Logical and (numpy's logical_and: nonzero is true), as a boolean tensor."""
    return _apply(And, "_and", a, b)


def _or(a: Tensor | Any, b: Tensor | Any) -> Tensor:
    """Logical or (nonzero is true), as a boolean tensor."""
    return _apply(Or, "_or", a, b)


def _xor(a: Tensor | Any, b: Tensor | Any) -> Tensor:
    """Logical exclusive or (nonzero is true), as a boolean tensor."""
    return _apply(Xor, "_xor", a, b)


def _not(x: Tensor) -> Tensor:
    """Logical not: true where x is zero, as a boolean tensor."""
    return Not()(x)[0]
