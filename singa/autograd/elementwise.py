"""Elementwise arithmetic and math functions.

Binary operators broadcast as numpy does; each gradient is summed back to its input's
shape (and cast back to its dtype). A Python number or array given as one operand of a
binary function is wrapped as a constant of the other operand's dtype.

Mixed dtypes follow PyTorch: a floating array combined with an integer or boolean one
computes in the floating dtype (so ``float32 * int64`` stays float32); two different
floating dtypes promote as numpy does.

Conventions at points of non-differentiability (PyTorch's):

- ``abs``: gradient ``sign(x)``, i.e. 0 at x == 0.
- ``sign``: gradient 0 everywhere.
- ``clip``: gradient 1 where ``min <= x <= max`` (bounds included), 0 elsewhere.
- ``maximum`` / ``minimum``: the gradient goes to the larger (smaller) input; at ties
  it is split equally, half to each.
- ``pow(a, b)``: d/da = b * a**(b-1), taken as 0 where b == 0; d/db = y * log(a) where
  a > 0 and 0 where a <= 0 (a**b is not differentiable in b there over the reals;
  0 is the one-sided limit at a == 0, b > 0). This is TensorFlow's guard.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from singa.autograd.activation import erf as erf_of_array
from singa.autograd.engine import Operation, unbroadcast
from singa.device import array_module
from singa.kernels import adds, workers
from singa.kernels.gelu import erf_values
from singa.kernels.jit import takes_floats
from singa.tensor import Tensor

__all__ = [
    "add",
    "sub",
    "mul",
    "div",
    "pow",
    "neg",
    "exp",
    "log",
    "sqrt",
    "abs",
    "clip",
    "sign",
    "maximum",
    "minimum",
    "cast",
    "erf",
    "identity",
    "negative",
    "reciprocal",
    "Identity",
    "Negative",
    "Reciprocal",
    "Cast",
    "Erf",
]

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


# ----- helpers -------------------------------------------------------------------------
def _promote(a: Any, b: Any) -> tuple:
    """Cast the non-floating operand to the floating one's dtype (PyTorch's rule)."""
    fa, fb = a.dtype.kind == "f", b.dtype.kind == "f"
    if fa and not fb:
        return a, b.astype(a.dtype)
    if fb and not fa:
        return a.astype(b.dtype), b
    return a, b


def _to(g: Any, shape: tuple, dtype: Any) -> Any:
    """Sum ``g`` down to ``shape``; cast it back to a floating input's ``dtype``."""
    if g.shape != shape:
        g = unbroadcast(g, shape)
    if g.dtype != dtype and dtype.kind == "f":
        g = g.astype(dtype)
    return g


def _operands(name: str, a: Any, b: Any) -> tuple[Tensor, Tensor]:
    """Wrap a non-Tensor operand as a constant and check that the shapes broadcast."""
    if not isinstance(a, Tensor):
        if not isinstance(b, Tensor):
            raise TypeError(f"{name}: at least one operand must be a Tensor")
        a = b._lift(a)
    elif not isinstance(b, Tensor):
        b = a._lift(b)
    sa, sb = a.data.shape, b.data.shape
    if sa != sb:
        for m, n in zip(reversed(sa), reversed(sb)):
            if m != n and m != 1 and n != 1:
                raise ValueError(f"{name}: shapes {sa} and {sb} cannot be broadcast together")
    return a, b


# ----- binary arithmetic -----------------------------------------------------------------
class Add(Operation):
    """y = a + b."""

    def forward(self, a, b):
        self.sum_computed(a, b)
        if a.dtype != b.dtype:
            a, b = _promote(a, b)
        return adds.added(a, b)

    def sum_computed(self, a, b) -> None:
        """The forward's bookkeeping without the sum, for a graph whose fused kernel
        wrote ``a + b`` already (:mod:`singa.model.training_fusion`): what the backward
        reads."""
        if self.requires_grad:
            self.cache = (a.shape, a.dtype, b.shape, b.dtype)

    def backward(self, dy):
        sa, ta, sb, tb = self.cache
        da = _to(dy, sa, ta) if self.needs_grad[0] else None
        db = _to(dy, sb, tb) if self.needs_grad[1] else None
        return da, db

    def _forward_into_a(self, a, b):
        if self.requires_grad:
            self.cache = (a.shape, a.dtype, b.shape, b.dtype)
        if not adds.add(a, b, a):
            array_module(a).add(a, b, out=a)
        return a

    def _forward_into_b(self, a, b):
        if self.requires_grad:
            self.cache = (a.shape, a.dtype, b.shape, b.dtype)
        if not adds.add(a, b, b):
            array_module(a).add(a, b, out=b)
        return b

    forward_inplace = ((_forward_into_a, 0), (_forward_into_b, 1))


class Sub(Operation):
    """y = a - b."""

    def forward(self, a, b):
        if self.requires_grad:
            self.cache = (a.shape, a.dtype, b.shape, b.dtype)
        if a.dtype != b.dtype:
            a, b = _promote(a, b)
        return a - b

    def backward(self, dy):
        sa, ta, sb, tb = self.cache
        da = _to(dy, sa, ta) if self.needs_grad[0] else None
        db = _to(-dy, sb, tb) if self.needs_grad[1] else None
        return da, db


class Mul(Operation):
    """y = a * b."""

    def forward(self, a, b):
        sa, ta, sb, tb = a.shape, a.dtype, b.shape, b.dtype
        if ta != tb:
            a, b = _promote(a, b)
        if self.requires_grad:
            ng = self.needs_grad
            self.cache = (a if ng[1] else None, b if ng[0] else None, sa, ta, sb, tb)
        return a * b

    def backward(self, dy):
        a, b, sa, ta, sb, tb = self.cache
        da = _to(dy * b, sa, ta) if self.needs_grad[0] else None
        db = _to(dy * a, sb, tb) if self.needs_grad[1] else None
        return da, db


class Div(Operation):
    """y = a / b."""

    def forward(self, a, b):
        sa, ta, sb, tb = a.shape, a.dtype, b.shape, b.dtype
        if ta != tb:
            a, b = _promote(a, b)
        y = a / b
        if self.requires_grad:
            self.cache = (b, y if self.needs_grad[1] else None, sa, ta, sb, tb)
        return y

    def backward(self, dy):
        b, y, sa, ta, sb, tb = self.cache
        g = dy / b
        da = _to(g, sa, ta) if self.needs_grad[0] else None
        db = _to(-g * y, sb, tb) if self.needs_grad[1] else None
        return da, db


class Pow(Operation):
    """y = a ** b (see the module docstring for the gradient at a <= 0 and b == 0)."""

    def forward(self, a, b):
        sa, ta, sb, tb = a.shape, a.dtype, b.shape, b.dtype
        if ta != tb:
            a, b = _promote(a, b)
        y = a**b
        if self.requires_grad:
            self.cache = (a, b, y if self.needs_grad[1] else None, sa, ta, sb, tb)
        return y

    def backward(self, dy):
        a, b, y, sa, ta, sb, tb = self.cache
        xp = array_module(dy)
        da = db = None
        with np.errstate(divide="ignore", invalid="ignore"):
            if self.needs_grad[0]:
                g = b * a ** (b - 1)
                zero_b = b == 0
                if zero_b.any():  # 0 * 0**-1 would be nan; the derivative is 0
                    g = xp.where(zero_b, 0, g)
                da = _to(dy * g, sa, ta)
            if self.needs_grad[1]:
                pos = a > 0
                g = xp.where(pos, y * xp.log(xp.where(pos, a, 1)), 0)
                db = _to(dy * g, sb, tb)
        return da, db


class Maximum(Operation):
    """y = max(a, b); at ties the gradient is split equally."""

    def forward(self, a, b):
        sa, ta, sb, tb = a.shape, a.dtype, b.shape, b.dtype
        if ta != tb:
            a, b = _promote(a, b)
        if self.requires_grad:
            self.cache = (a, b, sa, ta, sb, tb)
        return array_module(a).maximum(a, b)

    def backward(self, dy):
        a, b, sa, ta, sb, tb = self.cache
        return _split(dy, a > b, a >= b, self.needs_grad, sa, ta, sb, tb)


class Minimum(Operation):
    """y = min(a, b); at ties the gradient is split equally."""

    def forward(self, a, b):
        sa, ta, sb, tb = a.shape, a.dtype, b.shape, b.dtype
        if ta != tb:
            a, b = _promote(a, b)
        if self.requires_grad:
            self.cache = (a, b, sa, ta, sb, tb)
        return array_module(a).minimum(a, b)

    def backward(self, dy):
        a, b, sa, ta, sb, tb = self.cache
        return _split(dy, a < b, a <= b, self.needs_grad, sa, ta, sb, tb)


def _split(dy, strict, loose, needs, sa, ta, sb, tb):
    """Share ``dy`` between a (weight 1 where ``strict``, 1/2 at ties) and b (the rest)."""
    w = strict.astype(dy.dtype)
    w += loose
    w *= 0.5
    ga = dy * w
    da = _to(ga, sa, ta) if needs[0] else None
    db = _to(dy - ga, sb, tb) if needs[1] else None
    return da, db


# ----- unary functions -----------------------------------------------------------------
class Neg(Operation):
    """y = -x."""

    def forward(self, x):
        return -x

    def backward(self, dy):
        return -dy


class Exp(Operation):
    """y = exp(x)."""

    def forward(self, x):
        y = array_module(x).exp(x)
        if self.requires_grad:
            self.cache = y
        return y

    def backward(self, dy):
        return dy * self.cache


class Log(Operation):
    """y = log(x) (natural logarithm)."""

    def forward(self, x):
        if self.requires_grad:
            self.cache = x
        return array_module(x).log(x)

    def backward(self, dy):
        return dy / self.cache


class Sqrt(Operation):
    """y = sqrt(x)."""

    def forward(self, x):
        y = array_module(x).sqrt(x)
        if self.requires_grad:
            self.cache = y
        return y

    def backward(self, dy):
        return dy / (2 * self.cache)


class Abs(Operation):
    """y = |x|; gradient sign(x) (0 at x == 0)."""

    def forward(self, x):
        if self.requires_grad:
            self.cache = x
        return array_module(x).abs(x)

    def backward(self, dy):
        return dy * array_module(dy).sign(self.cache)


class Sign(Operation):
    """y = sign(x) (-1, 0 or 1); its gradient is 0 everywhere."""

    def forward(self, x):
        if self.requires_grad:
            self.cache = (x.shape, x.dtype)
        return array_module(x).sign(x)

    def backward(self, dy):
        return array_module(dy).zeros(*self.cache)


class Clip(Operation):
    """y = min(max(x, min), max); gradient 1 where min <= x <= max, else 0.

    ``min`` or ``max`` may be None (no bound on that side).
    """

    def __init__(self, min: float | None = None, max: float | None = None):
        super().__init__()
        self.min = min
        self.max = max

    def forward(self, x):
        xp = array_module(x)
        lo, hi = self.min, self.max
        y = x if lo is None else xp.maximum(x, lo)
        if hi is not None:
            y = xp.minimum(y, hi)
        elif lo is None:
            y = x.copy()
        if self.requires_grad:
            if lo is None:
                m = None if hi is None else x <= hi
            else:
                m = x >= lo
                if hi is not None:
                    m &= x <= hi
            self.cache = m
        return y

    def backward(self, dy):
        m = self.cache
        return dy if m is None else dy * m


# ----- public functions ----------------------------------------------------------------
def add(a: Tensor | Any, b: Tensor | Any) -> Tensor:
    """a + b with broadcasting."""
    a, b = _operands("add", a, b)
    return Add()(a, b)[0]


def sub(a: Tensor | Any, b: Tensor | Any) -> Tensor:
    """a - b with broadcasting."""
    a, b = _operands("sub", a, b)
    return Sub()(a, b)[0]


def mul(a: Tensor | Any, b: Tensor | Any) -> Tensor:
    """a * b with broadcasting (elementwise, not a matrix product)."""
    a, b = _operands("mul", a, b)
    return Mul()(a, b)[0]


def div(a: Tensor | Any, b: Tensor | Any) -> Tensor:
    """a / b with broadcasting (true division)."""
    a, b = _operands("div", a, b)
    return Div()(a, b)[0]


def pow(a: Tensor | Any, b: Tensor | Any) -> Tensor:
    """a ** b with broadcasting; both operands are differentiated.

    The gradient with respect to ``b`` is ``y * log(a)`` where a > 0 and 0 where a <= 0;
    the one with respect to ``a`` is ``b * a**(b-1)``, taken as 0 where b == 0.
    """
    a, b = _operands("pow", a, b)
    return Pow()(a, b)[0]


def maximum(a: Tensor | Any, b: Tensor | Any) -> Tensor:
    """Elementwise maximum with broadcasting; at ties each input gets half the gradient."""
    a, b = _operands("maximum", a, b)
    return Maximum()(a, b)[0]


def minimum(a: Tensor | Any, b: Tensor | Any) -> Tensor:
    """Elementwise minimum with broadcasting; at ties each input gets half the gradient."""
    a, b = _operands("minimum", a, b)
    return Minimum()(a, b)[0]


def neg(x: Tensor) -> Tensor:
    """-x."""
    return Neg()(x)[0]


def exp(x: Tensor) -> Tensor:
    """e ** x."""
    return Exp()(x)[0]


def log(x: Tensor) -> Tensor:
    """Natural logarithm (nan for x < 0, -inf at 0, as numpy)."""
    return Log()(x)[0]


def sqrt(x: Tensor) -> Tensor:
    """Square root (its gradient is infinite at 0)."""
    return Sqrt()(x)[0]


def abs(x: Tensor) -> Tensor:
    """|x|; the gradient at 0 is 0 (PyTorch's convention)."""
    return Abs()(x)[0]


def sign(x: Tensor) -> Tensor:
    """-1, 0 or 1 by the sign of x; the gradient is 0 everywhere."""
    return Sign()(x)[0]


def clip(x: Tensor, min: float | None = None, max: float | None = None) -> Tensor:
    """Clamp x to [min, max] (either bound may be None; with both None, a copy of x).

    The gradient passes where ``min <= x <= max``, bounds included (PyTorch's clamp);
    with min > max every element becomes ``max`` and gets no gradient.
    """
    return Clip(min, max)(x)[0]


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
    """``x`` converted to ``dtype`` (differentiable between floating types); ``x``
    itself when it already has that dtype."""
    if x.dtype == np.dtype(dtype):
        return x
    return Cast(dtype)(x)[0]


class Erf(Operation):
    """y = erf(x); dy/dx = 2 / sqrt(pi) * exp(-x^2)."""

    def forward(self, x):
        if self.requires_grad:
            self.cache = x
        if takes_floats(x):  # the compiled kernel (singa.kernels.gelu)
            y = np.empty_like(x)
            workers.run_flat(erf_values, y, x)
            return y
        xc = x.astype(np.float32) if x.dtype.itemsize < 4 else x
        return erf_of_array(xc).astype(x.dtype, copy=False)

    def backward(self, dy):
        x = self.cache
        return dy * (_TWO_OVER_SQRT_PI * array_module(x).exp(-(x * x)))


def erf(x: Tensor) -> Tensor:
    """The error function, elementwise."""
    return Erf()(x)[0]


# ----- SINGA's identity, negative and reciprocal ------------------------------------------
class Identity(Operation):
    """y = x (the same array, as numpy views share memory); dy/dx = 1."""

    def forward(self, x):
        return x

    def backward(self, dy):
        return dy


class Reciprocal(Operation):
    """y = 1 / x; dy/dx = -1 / x^2 = -y^2."""

    def forward(self, x):
        y = 1 / x
        if self.requires_grad:
            self.cache = y
        return y

    def backward(self, dy):
        y = self.cache
        return -dy * y * y


#: SINGA's name of :class:`Neg`.
Negative = Neg


def identity(x: Tensor) -> Tensor:
    """x itself as a new graph node (ONNX Identity); the gradient passes unchanged."""
    return Identity()(x)[0]


def negative(x: Tensor) -> Tensor:
    """-x (SINGA's name of :func:`neg`)."""
    return Neg()(x)[0]


def reciprocal(x: Tensor) -> Tensor:
    """1 / x of a floating tensor (inf at 0, as numpy)."""
    if x.dtype.kind != "f":
        raise ValueError(f"reciprocal: needs a floating-point tensor, got {x.dtype}")
    return Reciprocal()(x)[0]
