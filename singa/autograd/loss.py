"""Loss functions. Each returns a tensor of shape (1,) with the input's dtype, as SINGA
does (so ``tensor.to_numpy(loss)[0]`` is the value).

The class axis is the last one. Class-index targets have shape ``x.shape[:-1]`` (or
``x.shape[:-1] + (1,)`` when there are several classes: SINGA takes a target with one
element per row as indices, e.g. its char-rnn example's (N, 1) labels) and any numeric
dtype (float labels must hold whole numbers); out-of-range indices raise ValueError.
Targets never get a gradient: an operator's ``backward(dy=1.0)`` returns the gradient
of ``x`` alone, as SINGA's loss operators do, so ``loss.creator.backward()`` is
d loss / d x. Floating targets are cast to ``x``'s dtype.

"Mean over the batch" divides by the number of rows ``N = x.size // x.shape[-1]``
(``x.shape[0]`` for the usual (N, C) input).
"""

from __future__ import annotations

import math

import numpy as np

from singa.autograd.engine import Operation
from singa.autograd.errors import ShapeError
from singa.device import array_module
from singa.kernels.attention_rows import softmax_xent_float32
from singa.kernels.jit import kernel, takes_floats
from singa.tensor import Tensor

__all__ = [
    "softmax_cross_entropy",
    "cross_entropy",
    "mse_loss",
    "binary_cross_entropy",
    "nll_loss",
    "ranking_loss",
    "is_index_target",
]

_LOG_MIN = -100.0  # PyTorch clamps log(p) at -100 in binary_cross_entropy
_P_MIN = math.exp(_LOG_MIN)
_BCE_EPS = 1e-12  # PyTorch's binary_cross_entropy_backward


# ----- helpers -------------------------------------------------------------------------
def is_index_target(x_shape: tuple, t_shape: tuple) -> bool:
    """Whether a target of shape ``t_shape`` holds class indices for scores of shape
    ``x_shape`` (class axis last): ``x_shape[:-1]``, or that with a trailing 1 when
    there are several classes; otherwise it holds labels of x's shape."""
    rows = tuple(x_shape[:-1])
    t_shape = tuple(t_shape)
    return t_shape == rows or (t_shape == rows + (1,) and tuple(x_shape[-1:]) != (1,))


def _is_index_target(x, t) -> bool:
    return is_index_target(x.shape, t.shape)


def _rows(x) -> int:
    return x.size // x.shape[-1] if x.ndim else 1


def _indices(name: str, t, c: int):
    """Class indices of ``t`` as a flat int64 array, checked to be whole and in [0, c)."""
    xp = array_module(t)
    idx = t.astype(xp.int64, copy=False).reshape(-1)
    if t.dtype.kind == "f" and bool((idx != t.reshape(-1)).any()):
        raise ValueError(f"{name}: float class indices must be whole numbers")
    if idx.size:
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= c:
            raise ValueError(f"{name}: class indices must lie in [0, {c}), got values in [{lo}, {hi}]")
    return idx


def _like(t, x):
    """Floating target ``t`` in x's dtype (integers too, for labels of x's shape)."""
    return t if t.dtype == x.dtype else t.astype(x.dtype)


def _scalar(xp, value, dtype):
    return xp.asarray(value, dtype=dtype).reshape(1)


def _check_float(name: str, x: Tensor, what: str = "x") -> None:
    if x.dtype.kind != "f":
        raise ValueError(f"{name}: {what} must be a floating-point tensor, got dtype {x.dtype}")


def _check_numeric(name: str, t: Tensor) -> None:
    if t.dtype.kind not in "biuf":
        raise ValueError(f"{name}: target must be numeric, got dtype {t.dtype}")


def _check_class_target(name: str, x: Tensor, t: Tensor, labels: bool = True) -> None:
    """t is indices of shape x.shape[:-1] or (when ``labels``) labels of x's shape."""
    _check_float(name, x)
    _check_numeric(name, t)
    if x.ndim() < 1:
        raise ValueError(f"{name}: x of shape {x.shape} needs a class axis")
    if is_index_target(x.shape, t.shape):
        return
    if labels and t.shape == x.shape:
        return
    expect = "class indices of shape x.shape[:-1] (or with a trailing 1)" + (
        " or labels of x's shape" if labels else ""
    )
    raise ShapeError(f"{name}: x of shape {x.shape} and target of shape {t.shape} do not match ({expect})")


def _check_same(name: str, x: Tensor, t: Tensor) -> None:
    _check_float(name, x)
    _check_numeric(name, t)
    if t.shape != x.shape:
        raise ShapeError(
            f"{name}: x of shape {x.shape} and target of shape {t.shape} must have the same shape"
        )


def _dy(dy):
    """The loss gradient as a 0-d array or number (SINGA's loss backward defaults to 1)."""
    return dy if isinstance(dy, int | float) else dy.reshape(())


# ----- operators -----------------------------------------------------------------------
class SoftMaxCrossEntropy(Operation):
    """loss = mean over the rows of -sum(t * log_softmax(x)) along the last axis.

    ``t`` holds class indices (one fewer dimension than ``x``, any numeric dtype) or
    one-hot / soft labels (the same shape as ``x``).
    """

    def forward(self, x, t):
        xp = array_module(x)
        c = x.shape[-1]
        n = _rows(x)
        if takes_floats(x) and _is_index_target(x, t) and t.dtype.kind in "iuf":
            if t.dtype.kind == "f":  # float labels: checked to be whole numbers first
                idx = _indices("softmax_cross_entropy", t, c)
            else:
                idx = t.reshape(-1).astype(np.int64, copy=False)
            g = np.empty(x.shape, x.dtype)  # d loss / d x, made in the same pass
            rows = np.ascontiguousarray(x.reshape(-1, c))
            rows_kernel = softmax_xent_float32 if x.dtype == np.float32 else _softmax_xent
            total, bad = rows_kernel(rows, idx, 1.0 / max(n, 1), g.reshape(-1, c))
            if bad:  # an index outside [0, c): _indices says which values
                _indices("softmax_cross_entropy", t, c)
            if self.requires_grad:
                self.cache = (g, None)
            return _scalar(xp, np.float64(total) / n, x.dtype)  # an empty batch gives NaN
        shifted = x - x.max(axis=-1, keepdims=True)
        e = xp.exp(shifted)
        s = e.sum(axis=-1, keepdims=True)
        logp = shifted
        logp -= xp.log(s)
        if _is_index_target(x, t):
            idx = _indices("softmax_cross_entropy", t, c)
            loss = -logp.reshape(-1, c)[xp.arange(idx.size), idx].sum() / n
            tt = idx
        else:
            tt = _like(t, x)
            loss = -(tt * logp).sum() / n
        if self.requires_grad:
            e /= s
            self.cache = (e, tt)
        return _scalar(xp, loss, x.dtype)

    def backward(self, dy=1.0):
        p, t = self.cache
        if t is None:  # the compiled forward left the gradient itself
            g = p.copy()
            g *= _dy(dy)
            return g
        xp = array_module(p)
        c = p.shape[-1]
        n = _rows(p)
        if t.dtype.kind == "i":  # flat class indices (labels were cast to p's dtype)
            g = p.reshape(-1, c).copy()
            g[xp.arange(t.size), t] -= 1
            g = g.reshape(p.shape)
        else:  # d/dx of -sum(t * log_softmax(x)) = p * sum(t) - t (rows of t need not sum to 1)
            g = p * t.sum(axis=-1, keepdims=True) - t
        g *= _dy(dy) / n
        return g


# ----- the CPU softmax cross-entropy kernel (numba) -------------------------------------
# For class indices on the CPU (float32/float64): one pass per row makes the loss and its
# gradient (softmax - onehot) / N, which backward only scales by dy, instead of about a
# dozen numpy calls on small arrays, each 2-4 us of dispatch (the MLP's (64, 10) scores:
# forward 29 -> 16 us, backward 10 -> 5 us). Sums and logarithms run in float64; the
# gradient is stored in the scores' dtype. float32 scores take the vectorised twin,
# ``kernels.attention_rows.softmax_xent_float32``. GPU and float16 arrays, and labels of
# the scores' shape, take the array expressions of the operator above.
@kernel
def _softmax_xent(x, idx, scale, g):  # pragma: no cover (compiled)
    """g = (softmax(x) - onehot(idx)) * scale by rows; returns (sum over rows of
    -log softmax(x)[row, idx[row]], whether an index lies outside [0, columns))."""
    total = 0.0
    for i in range(x.shape[0]):
        k = idx[i]
        if k < 0 or k >= x.shape[1]:
            return 0.0, True
        top = x[i, 0]
        for j in range(1, x.shape[1]):
            top = max(top, x[i, j])
        s = 0.0
        for j in range(x.shape[1]):
            e = math.exp(float(x[i, j]) - float(top))
            g[i, j] = e
            s += e
        for j in range(x.shape[1]):
            g[i, j] = (g[i, j] / s - (1.0 if j == k else 0.0)) * scale
        total += math.log(s) - (float(x[i, k]) - float(top))
    return total, False


class CrossEntropy(Operation):
    """loss = -sum(t * log(y)) / N for probabilities ``y`` (SINGA's CrossEntropy).

    log(y) is clamped at -100 (so y == 0 gives a finite loss, and 0 * log 0 is 0); the
    gradient is -t / y where log(y) > -100 and 0 where the clamp is active.
    """

    def forward(self, y, t):
        xp = array_module(y)
        c = y.shape[-1]
        n = _rows(y)
        if _is_index_target(y, t):
            idx = _indices("cross_entropy", t, c)
            picked = y.reshape(-1, c)[xp.arange(idx.size), idx]
            with np.errstate(divide="ignore"):
                loss = -xp.maximum(xp.log(picked), _LOG_MIN).sum() / n
            tt = idx
        else:
            tt = _like(t, y)
            with np.errstate(divide="ignore"):
                logy = xp.maximum(xp.log(y), _LOG_MIN)
            loss = -(tt * logy).sum() / n
        if self.requires_grad:
            self.cache = (y, tt)
        return _scalar(xp, loss, y.dtype)

    def backward(self, dy=1.0):
        y, t = self.cache
        xp = array_module(y)
        c = y.shape[-1]
        scale = -_dy(dy) / _rows(y)
        if t.dtype.kind == "i":  # flat class indices
            rows = xp.arange(t.size)
            picked = y.reshape(-1, c)[rows, t]
            g = xp.zeros((t.size, c), dtype=y.dtype)
            g[rows, t] = (picked > _P_MIN) * (scale / xp.maximum(picked, _P_MIN))
            return g.reshape(y.shape)
        g = t / xp.maximum(y, _P_MIN)
        g *= y > _P_MIN
        g *= scale
        return g


class MSELoss(Operation):
    """loss = mean((x - t)**2) over all elements (PyTorch's ``mse_loss``)."""

    def forward(self, x, t):
        xp = array_module(x)
        d = x - _like(t, x)
        loss = xp.vdot(d.reshape(-1), d.reshape(-1)) / max(d.size, 1) if d.size else xp.nan
        if self.requires_grad:
            self.cache = d
        return _scalar(xp, loss, x.dtype)

    def backward(self, dy=1.0):
        d = self.cache
        return (d * (_dy(dy) * (2.0 / max(d.size, 1)))).astype(d.dtype, copy=False)


class BinaryCrossEntropy(Operation):
    """loss = -mean(t * log(x) + (1 - t) * log(1 - x)) over all elements, each log
    clamped at -100, and gradient ``(x - t) / max(x (1 - x), 1e-12) / size``: both as
    PyTorch computes them. The gradient is the exact derivative wherever
    x (1 - x) > 1e-12, and stays finite and nonzero at x = 0 or 1."""

    def forward(self, x, t):
        xp = array_module(x)
        if x.size and (bool((x < 0).any()) or bool((x > 1).any())):
            raise ValueError("binary_cross_entropy: x must hold probabilities in [0, 1]")
        tt = _like(t, x)
        with np.errstate(divide="ignore"):
            lx = xp.maximum(xp.log(x), _LOG_MIN)
            l1x = xp.maximum(xp.log(1 - x), _LOG_MIN)
        s = tt * lx
        s += (1 - tt) * l1x
        loss = -s.sum() / max(x.size, 1)
        if self.requires_grad:
            self.cache = (x, tt)
        return _scalar(xp, loss, x.dtype)

    def backward(self, dy=1.0):
        x, t = self.cache
        xp = array_module(x)
        g = x - t
        g /= xp.maximum(x * (1 - x), _BCE_EPS)
        g *= _dy(dy) / max(x.size, 1)
        return g


class RankingLoss(Operation):
    """loss = sum(max(0, M - pos + neg)) / pos.shape[0]: a margin ``M`` hinge between the
    scores of matching (``pos``) and non-matching (``neg``) pairs. The gradient is
    -1/N (pos) and 1/N (neg) where the hinge is active (> 0), 0 elsewhere."""

    def __init__(self, M: float = 0.2):
        super().__init__()
        self.M = M

    def forward(self, pos, neg):
        xp = array_module(pos)
        h = neg - pos
        h += self.M
        active = h > 0
        n = pos.shape[0]
        if self.requires_grad:
            self.cache = (active, n)
        return _scalar(xp, (h * active).sum() / n, pos.dtype)

    def backward(self, dy=1.0):
        active, n = self.cache
        g = active * (_dy(dy) / n)
        return -g if self.needs_grad[0] else None, g if self.needs_grad[1] else None


class NLLLoss(Operation):
    """loss = -mean over the rows of x[row, t[row]] for log-probabilities ``x``."""

    def forward(self, x, t):
        xp = array_module(x)
        c = x.shape[-1]
        idx = _indices("nll_loss", t, c)
        loss = -x.reshape(-1, c)[xp.arange(idx.size), idx].sum() / _rows(x)
        if self.requires_grad:
            self.cache = (x.shape, x.dtype, idx)
        return _scalar(xp, loss, x.dtype)

    def backward(self, dy=1.0):
        shape, dtype, idx = self.cache
        xp = array_module(idx)
        c = shape[-1]
        n = idx.size
        g = xp.zeros((n, c), dtype=dtype)
        g[xp.arange(n), idx] = -_dy(dy) / max(n, 1)
        return g.reshape(shape)


# ----- public functions ----------------------------------------------------------------
def softmax_cross_entropy(x: Tensor, t: Tensor) -> Tensor:
    """Cross-entropy of softmax(x) (along the last axis) against class indices of shape
    ``x.shape[:-1]`` or one-hot / soft labels of x's shape; mean over the rows."""
    _check_class_target("softmax_cross_entropy", x, t)
    return SoftMaxCrossEntropy()(x, t)[0]


def cross_entropy(y: Tensor, t: Tensor) -> Tensor:
    """SINGA's CrossEntropy: ``-sum(t * log(y)) / N`` for probabilities ``y`` (e.g. a
    softmax output) and one-hot / soft labels ``t`` of y's shape, or class indices of
    shape ``y.shape[:-1]``. log(y) is clamped at -100, so y == 0 stays finite."""
    _check_class_target("cross_entropy", y, t)
    return CrossEntropy()(y, t)[0]


def mse_loss(x: Tensor, t: Tensor) -> Tensor:
    """Mean squared error over all elements, ``mean((x - t)**2)`` (PyTorch's default);
    ``t`` has ``x``'s shape or broadcasts to it (SINGA's subtraction broadcasts, e.g. an
    (N, 1) target against (N, C) outputs); the mean is over ``x``'s elements."""
    _check_float("mse_loss", x)
    _check_numeric("mse_loss", t)
    if _broadcast_shape(x.shape, t.shape) != tuple(x.shape):
        raise ShapeError(
            f"mse_loss: x of shape {x.shape} and target of shape {t.shape} do not match "
            "(the target does not broadcast to x's shape)"
        )
    return MSELoss()(x, t)[0]


def _broadcast_shape(a: tuple, b: tuple) -> tuple | None:
    """numpy's broadcast of two shapes, None when they do not broadcast."""
    try:
        return tuple(np.broadcast_shapes(tuple(a), tuple(b)))
    except ValueError:
        return None


def binary_cross_entropy(x: Tensor, t: Tensor) -> Tensor:
    """``-mean(t log x + (1 - t) log(1 - x))`` for probabilities ``x`` in [0, 1] and
    targets ``t`` of the same shape; each log is clamped at -100 (PyTorch)."""
    _check_same("binary_cross_entropy", x, t)
    return BinaryCrossEntropy()(x, t)[0]


def nll_loss(x: Tensor, t: Tensor) -> Tensor:
    """Negative log-likelihood: ``-mean(x[i, t[i]])`` for log-probabilities ``x`` (e.g.
    from ``log_softmax(x, axis=-1)``) and class indices ``t`` of shape ``x.shape[:-1]``.
    The class axis is the last one (for (N, C) inputs this is PyTorch's nll_loss)."""
    _check_class_target("nll_loss", x, t, labels=False)
    return NLLLoss()(x, t)[0]


def ranking_loss(pos: Tensor, neg: Tensor, M: float = 0.2) -> Tensor:
    """Margin ranking loss ``sum(max(0, M - pos + neg)) / N`` (N = pos.shape[0]) of the
    scores ``pos`` of matching pairs against ``neg`` of non-matching ones (SINGA's;
    its backward ignored the incoming gradient and divided by pos.size: here the
    gradient is that of the forward formula)."""
    _check_same("ranking_loss", pos, neg)
    _check_float("ranking_loss", neg, "neg")
    if pos.dtype != neg.dtype or pos.ndim() < 1:
        raise ValueError(
            f"ranking_loss: pos and neg need one floating dtype and at least one axis, "
            f"got {pos.dtype} {pos.shape} and {neg.dtype} {neg.shape}"
        )
    return RankingLoss(M)(pos, neg)[0]
