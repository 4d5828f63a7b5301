"""Linear algebra: matrix products (plain, batched, ONNX Gemm) and bias addition."""

from __future__ import annotations

from typing import Any

from singa.autograd.engine import Operation, check_same_dtype, unbroadcast
from singa.autograd.errors import ShapeError
from singa.device import array_module
from singa.kernels import adds
from singa.kernels.products import matmul as _product
from singa.kernels.products import matmuls as _products
from singa.tensor import Tensor

__all__ = ["matmul", "add_bias", "gemm", "cossim", "det"]

_ONES: dict = {}


def ones_vector(like: Any, n: int) -> Any:
    """A cached read-only-by-convention vector of ``n`` ones with ``like``'s dtype and device.

    ``ones @ dy`` sums the rows of ``dy`` through BLAS, much faster than ``dy.sum(0)``
    on tall arrays. Callers must never write into the returned array.
    """
    dev = getattr(getattr(like, "device", None), "id", -1)
    key = (type(like), dev, n, like.dtype.str)
    o = _ONES.get(key)
    if o is None:
        if len(_ONES) > 256:
            _ONES.clear()
        o = _ONES[key] = array_module(like).ones(n, dtype=like.dtype)
    return o


def _swap(a: Any) -> Any:
    """The matrix transpose of the last two axes."""
    return a.T if a.ndim == 2 else a.swapaxes(-1, -2)


def _broadcast_batch(sa: tuple, sb: tuple) -> tuple | None:
    """The broadcast batch shape of two stacks of matrices, None if incompatible."""
    a, b = sa[:-2], sb[:-2]
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + a
    b = (1,) * (n - len(b)) + b
    out = []
    for i, j in zip(a, b):
        if i != j and i != 1 and j != 1:
            return None
        out.append(max(i, j) if i != 0 and j != 0 else 0)
    return tuple(out)


class MatMul(Operation):
    """y = a @ b with numpy semantics: 2-D matrices or stacks of matrices whose
    leading (batch) dimensions broadcast; a 1-D operand is promoted and the added
    axis dropped again, as numpy does."""

    def forward(self, a, b):
        if self.requires_grad:
            self.cache = (a, b)
        return _product(a, b)

    def backward(self, dy):
        a, b = self.cache
        sa, sb = a.shape, b.shape
        if a.ndim == 1 or b.ndim == 1:  # promote as numpy does, then drop the axes again
            if a.ndim == 1 and b.ndim == 1:
                dy = dy.reshape(1, 1)
            elif a.ndim == 1:
                dy = dy.reshape(dy.shape[:-1] + (1,) + dy.shape[-1:])
            else:
                dy = dy.reshape(dy.shape + (1,))
            a = a.reshape(1, -1) if a.ndim == 1 else a
            b = b.reshape(-1, 1) if b.ndim == 1 else b
        if b.ndim == 2 and a.ndim >= 2 and all(self.needs_grad[:2]):
            # a matrix (or a stack of them: the batch folds into the rows) times one
            # matrix: both gradient products handed to the workers together
            k, m = a.shape[-1], dy.shape[-1]
            da, db = _products([(dy, b.T), (a.reshape(-1, k).T, dy.reshape(-1, m))])
            return da.reshape(sa), db.reshape(sb)
        da = db = None
        if self.needs_grad[0]:
            da = unbroadcast(_product(dy, _swap(b)), a.shape).reshape(sa)
        if self.needs_grad[1]:
            if b.ndim == 2 and a.ndim > 2:
                # a stack times one matrix: fold the batch into the rows (one GEMM)
                k, m = a.shape[-1], dy.shape[-1]
                db = _product(a.reshape(-1, k).T, dy.reshape(-1, m))
            else:
                db = unbroadcast(_product(_swap(a), dy), b.shape)
            db = db.reshape(sb)
        return da, db


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """Matrix product ``a @ b`` (numpy semantics: 2-D, or batched N-D with broadcast
    batch dimensions).

    Raises ValueError naming both shapes when the inner dimensions or the batch
    dimensions do not match.
    """
    sa, sb = a.shape, b.shape
    if len(sa) == 2 and len(sb) == 2:  # the common case, checked cheaply
        ok = sa[1] == sb[0]
    else:
        ok = len(sa) >= 1 and len(sb) >= 1
        if ok:
            ea = sa if len(sa) > 1 else (1,) + sa
            eb = sb if len(sb) > 1 else sb + (1,)
            ok = ea[-1] == eb[-2] and _broadcast_batch(ea, eb) is not None
    if not ok:
        raise ValueError(f"matmul: shapes {sa} and {sb} do not match")
    if a.dtype != b.dtype:
        check_same_dtype("matmul", a, b)
    return MatMul()(a, b)[0]


class AddBias(Operation):
    """y = x + b for a matrix x, with b broadcast along ``axis`` (0: b is added to
    every row, 1: to every column)."""

    def __init__(self, axis: int = 0):
        super().__init__()
        self.axis = axis

    def forward(self, x, b):
        if self.requires_grad:
            self.cache = b.shape
        if self.axis == 0:
            return adds.added(x, b.reshape(1, -1))
        return x + b.reshape(-1, 1)

    def backward(self, dy):
        db = None
        if self.needs_grad[1]:
            if self.axis == 0:
                db = ones_vector(dy, dy.shape[0]) @ dy
            else:
                db = dy @ ones_vector(dy, dy.shape[1])
            db = db.reshape(self.cache)
        return (dy if self.needs_grad[0] else None), db

    def _forward_into_x(self, x, b):
        if self.requires_grad:
            self.cache = b.shape
        row = self.axis == 0
        if not (row and adds.add(x, b.reshape(1, -1), x)):
            x += b.reshape(1, -1) if row else b.reshape(-1, 1)
        return x

    forward_inplace = ((_forward_into_x, 0),)


def add_bias(x: Tensor, b: Tensor, axis: int = 0) -> Tensor:
    """Add bias ``b`` to every row (axis=0; b of shape (C,) or (1, C)) or every column
    (axis=1; b of shape (R,) or (R, 1)) of the matrix ``x`` of shape (R, C).

    Never modifies ``x``. The bias gradient has ``b``'s shape.
    """
    if axis not in (0, 1):
        raise ShapeError(f"add_bias: axis must be 0 or 1, got {axis}")
    ok = x.ndim() == 2
    if ok:
        n = x.shape[1 - axis]
        ok = tuple(b.shape) in ((n,), (1, n) if axis == 0 else (n, 1))
    if not ok:
        raise ShapeError(
            f"add_bias: x of shape {x.shape} and bias of shape {b.shape} do not match (axis={axis})"
        )
    if x.dtype != b.dtype:
        check_same_dtype("add_bias", x, b)
    return AddBias(axis)(x, b)[0]


class Gemm(Operation):
    """ONNX Gemm: y = alpha * A' @ B' + beta * C, with A' = A.T if transA (B' likewise)
    and C (optional) broadcast to the result's shape."""

    def __init__(self, alpha: float = 1.0, beta: float = 1.0, transA: bool = False, transB: bool = False):
        super().__init__()
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.transA = bool(transA)
        self.transB = bool(transB)

    def forward(self, a, b, c=None):
        if self.requires_grad:
            self.cache = (a, b, None if c is None else c.shape)
        y = _product(a.T if self.transA else a, b.T if self.transB else b)
        if self.alpha != 1.0:
            y *= self.alpha
        if c is not None:
            if self.beta == 1.0:
                y += c
            elif self.beta != 0.0:
                y += self.beta * c
        return y

    def backward(self, dy):
        a, b, sc = self.cache
        g = dy * self.alpha if self.alpha != 1.0 else dy
        da = db = dc = None
        if self.needs_grad[0]:
            bm = b.T if self.transB else b
            # dA' = g @ B'.T ; dA = dA'.T = B' @ g.T when transposed
            da = _product(bm, g.T) if self.transA else _product(g, bm.T)
        if self.needs_grad[1]:
            am = a.T if self.transA else a
            db = _product(g.T, am) if self.transB else _product(am.T, g)
        if sc is not None and self.needs_grad[2]:
            dc = unbroadcast(dy * self.beta if self.beta != 1.0 else dy, sc)
        return (da, db) if sc is None else (da, db, dc)


def gemm(
    A: Tensor,
    B: Tensor,
    C: Tensor | None = None,
    alpha: float = 1.0,
    beta: float = 1.0,
    transA: bool = False,
    transB: bool = False,
) -> Tensor:
    """ONNX Gemm: ``alpha * A' @ B' + beta * C`` for 2-D ``A`` and ``B`` (``A' = A.T``
    when ``transA``, likewise ``B'``); ``C`` is optional and broadcasts to (M, N).

    Raises ValueError naming the shapes when they do not fit.
    """
    sa, sb = tuple(A.shape), tuple(B.shape)
    if len(sa) != 2 or len(sb) != 2:
        raise ValueError(f"gemm: A and B must be 2-D, got shapes {sa} and {sb}")
    m, k = sa[::-1] if transA else sa
    k2, n = sb[::-1] if transB else sb
    if k != k2:
        raise ValueError(
            f"gemm: shapes {sa} and {sb} do not match (transA={bool(transA)}, transB={bool(transB)})"
        )
    if C is None:
        return Gemm(alpha, beta, transA, transB)(A, B)[0]
    sc = tuple(C.shape)
    ok = len(sc) <= 2 and all(s in (1, t) for s, t in zip(sc[::-1], (n, m)))
    if not ok:
        raise ValueError(f"gemm: C of shape {sc} does not broadcast to the result shape {(m, n)}")
    return Gemm(alpha, beta, transA, transB)(A, B, C)[0]


class CosSim(Operation):
    """y[i] = <a[i], b[i]> / (|a[i]| |b[i]|) for the rows of two (N, D) matrices.

    Gradients: da[i] = dy[i] (b[i] / (|a[i]| |b[i]|) - y[i] a[i] / |a[i]|^2), and the
    same with a and b swapped.
    """

    def forward(self, a, b):
        xp = array_module(a)
        na = xp.sqrt((a * a).sum(axis=1))
        nb = xp.sqrt((b * b).sum(axis=1))
        y = (a * b).sum(axis=1) / (na * nb)
        if self.requires_grad:
            self.cache = (a, b, na, nb, y)
        return y

    def backward(self, dy):
        a, b, na, nb, y = self.cache
        k = (dy / (na * nb))[:, None]
        yy = (dy * y)[:, None]
        da = k * b - yy * a / (na * na)[:, None] if self.needs_grad[0] else None
        db = k * a - yy * b / (nb * nb)[:, None] if self.needs_grad[1] else None
        return da, db


def cossim(a: Tensor, b: Tensor) -> Tensor:
    """Cosine similarity of the matching rows of two (N, D) floating matrices: a tensor
    of shape (N,). A zero row gives nan (no epsilon, as SINGA)."""
    check_same_dtype("cossim", a, b, floating=True)
    if a.ndim() != 2 or a.shape != b.shape:
        raise ValueError(f"cossim: needs two (N, D) matrices of one shape, got {a.shape} and {b.shape}")
    return CosSim()(a, b)[0]


class Det(Operation):
    """y = the determinants of the square matrices in the last two axes (ONNX Det);
    dx = dy * det(x) * inverse(x)^T (Jacobi's formula; singular matrices raise)."""

    def forward(self, x):
        xp = array_module(x)
        y = xp.linalg.det(x)
        if self.requires_grad:
            self.cache = (x, y)
        return xp.asarray(y, dtype=x.dtype)

    def backward(self, dy):
        x, y = self.cache
        xp = array_module(dy)
        inv_t = xp.swapaxes(xp.linalg.inv(x), -1, -2)
        return (dy * y)[..., None, None] * inv_t


def det(x: Tensor) -> Tensor:
    """The determinant of each square matrix in the last two axes of ``x`` (float),
    shape x.shape[:-2] (ONNX Det, ``torch.linalg.det``)."""
    if x.ndim() < 2 or x.shape[-1] != x.shape[-2] or x.dtype.kind != "f":
        raise ValueError(f"det: needs floating square matrices in the last two axes, got {x.shape} {x.dtype}")
    return Det()(x)[0]
