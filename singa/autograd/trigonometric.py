"""Trigonometric and hyperbolic functions and their inverses, elementwise.

Each operator keeps its input for backward and differentiates by the textbook formula
(``d/dx asin(x) = 1 / sqrt(1 - x^2)`` and so on). Outside a function's domain (asin
of 2, acosh of 0.5, atanh of 1) the value is nan or inf as numpy gives it, and so is
the gradient. ``tanh`` lives with the activations.

Example::

    y = autograd.sin(x)            # x a floating Tensor
    y = autograd.Sin()(x)[0]       # SINGA's operator-class form
"""

from __future__ import annotations

from typing import Any

from singa.autograd.engine import Operation, check_same_dtype
from singa.device import array_module
from singa.tensor import Tensor

__all__ = [
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "asinh",
    "acosh",
    "atanh",
    "Sin",
    "Cos",
    "Tan",
    "Asin",
    "Acos",
    "Atan",
    "Sinh",
    "Cosh",
    "Asinh",
    "Acosh",
    "Atanh",
]


class _Elementwise(Operation):
    """y = f(x) with dy/dx = f'(x); subclasses give ``f`` and ``derivative`` on arrays."""

    @staticmethod
    def f(xp: Any, x: Any) -> Any:
        raise NotImplementedError

    @staticmethod
    def derivative(xp: Any, x: Any) -> Any:
        raise NotImplementedError

    def forward(self, x):
        if self.requires_grad:
            self.cache = x
        return self.f(array_module(x), x)

    def backward(self, dy):
        return dy * self.derivative(array_module(dy), self.cache)


class Sin(_Elementwise):
    """y = sin(x); dy/dx = cos(x)."""

    f = staticmethod(lambda xp, x: xp.sin(x))
    derivative = staticmethod(lambda xp, x: xp.cos(x))


class Cos(_Elementwise):
    """y = cos(x); dy/dx = -sin(x)."""

    f = staticmethod(lambda xp, x: xp.cos(x))
    derivative = staticmethod(lambda xp, x: -xp.sin(x))


class Tan(_Elementwise):
    """y = tan(x); dy/dx = 1 / cos(x)^2."""

    f = staticmethod(lambda xp, x: xp.tan(x))
    derivative = staticmethod(lambda xp, x: 1 / xp.cos(x) ** 2)


class Asin(_Elementwise):
    """y = asin(x) for x in [-1, 1]; dy/dx = 1 / sqrt(1 - x^2)."""

    f = staticmethod(lambda xp, x: xp.arcsin(x))
    derivative = staticmethod(lambda xp, x: 1 / xp.sqrt(1 - x * x))


class Acos(_Elementwise):
    """y = acos(x) for x in [-1, 1]; dy/dx = -1 / sqrt(1 - x^2)."""

    f = staticmethod(lambda xp, x: xp.arccos(x))
    derivative = staticmethod(lambda xp, x: -1 / xp.sqrt(1 - x * x))


class Atan(_Elementwise):
    """y = atan(x); dy/dx = 1 / (1 + x^2)."""

    f = staticmethod(lambda xp, x: xp.arctan(x))
    derivative = staticmethod(lambda xp, x: 1 / (1 + x * x))


class Sinh(_Elementwise):
    """y = sinh(x); dy/dx = cosh(x)."""

    f = staticmethod(lambda xp, x: xp.sinh(x))
    derivative = staticmethod(lambda xp, x: xp.cosh(x))


class Cosh(_Elementwise):
    """y = cosh(x); dy/dx = sinh(x)."""

    f = staticmethod(lambda xp, x: xp.cosh(x))
    derivative = staticmethod(lambda xp, x: xp.sinh(x))


class Asinh(_Elementwise):
    """y = asinh(x); dy/dx = 1 / sqrt(x^2 + 1)."""

    f = staticmethod(lambda xp, x: xp.arcsinh(x))
    derivative = staticmethod(lambda xp, x: 1 / xp.sqrt(x * x + 1))


class Acosh(_Elementwise):
    """y = acosh(x) for x >= 1; dy/dx = 1 / sqrt(x^2 - 1)."""

    f = staticmethod(lambda xp, x: xp.arccosh(x))
    derivative = staticmethod(lambda xp, x: 1 / xp.sqrt(x * x - 1))


class Atanh(_Elementwise):
    """y = atanh(x) for x in (-1, 1); dy/dx = 1 / (1 - x^2)."""

    f = staticmethod(lambda xp, x: xp.arctanh(x))
    derivative = staticmethod(lambda xp, x: 1 / (1 - x * x))


def _apply(op: type, name: str, x: Tensor) -> Tensor:
    check_same_dtype(name, x, floating=True)
    return op()(x)[0]


def sin(x: Tensor) -> Tensor:
    """Sine of a floating tensor, elementwise (radians)."""
    return _apply(Sin, "sin", x)


def cos(x: Tensor) -> Tensor:
    """Cosine of a floating tensor, elementwise (radians)."""
    return _apply(Cos, "cos", x)


def tan(x: Tensor) -> Tensor:
    """Tangent of a floating tensor, elementwise (radians)."""
    return _apply(Tan, "tan", x)


def asin(x: Tensor) -> Tensor:
    """Arcsine, elementwise (nan outside [-1, 1])."""
    return _apply(Asin, "asin", x)


def acos(x: Tensor) -> Tensor:
    """Arccosine, elementwise (nan outside [-1, 1])."""
    return _apply(Acos, "acos", x)


def atan(x: Tensor) -> Tensor:
    """Arctangent, elementwise."""
    return _apply(Atan, "atan", x)


def sinh(x: Tensor) -> Tensor:
    """Hyperbolic sine, elementwise."""
    return _apply(Sinh, "sinh", x)


def cosh(x: Tensor) -> Tensor:
    """Hyperbolic cosine, elementwise."""
    return _apply(Cosh, "cosh", x)


def asinh(x: Tensor) -> Tensor:
    """Inverse hyperbolic sine, elementwise."""
    return _apply(Asinh, "asinh", x)


def acosh(x: Tensor) -> Tensor:
    """Inverse hyperbolic cosine, elementwise (nan below 1)."""
    return _apply(Acosh, "acosh", x)


def atanh(x: Tensor) -> Tensor:
    """Inverse hyperbolic tangent, elementwise (+-inf at +-1, nan beyond)."""
    return _apply(Atanh, "atanh", x)
