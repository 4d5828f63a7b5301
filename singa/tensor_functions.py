"""SINGA's module-level tensor functions (re-exported by :mod:`singa.tensor`).

As in SINGA, these compute directly on the arrays and record no autograd
operation (use :mod:`singa.autograd` for differentiable math); the exceptions are
:func:`reshape` and :func:`transpose`, which call the differentiable Tensor
methods. Results live on the first argument's device.

Example::

    from singa import tensor
    t = tensor.from_numpy(np.arange(6.0).reshape(2, 3))
    tensor.sum(t, axis=1)            # Tensor [3., 12.]
    tensor.tensordot(t, t, ([0], [0]))
    tensor.average(t)                # 2.5 (a float)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from singa.tensor_core import Tensor

__all__ = [
    "abs",
    "add",
    "add_column",
    "add_row",
    "average",
    "axpy",
    "bernoulli",
    "ceil",
    "concatenate",
    "contiguous",
    "copy_data_to_from",
    "copy_from_numpy",
    "div",
    "einsum",
    "eltwise_mult",
    "eq",
    "exp",
    "from_raw_tensor",
    "from_raw_tensors",
    "gaussian",
    "ge",
    "gt",
    "le",
    "log",
    "lt",
    "mult",
    "pow",
    "product",
    "repeat",
    "reshape",
    "sigmoid",
    "sign",
    "sizeof",
    "softmax",
    "sqrt",
    "square",
    "sub",
    "sum",
    "sum_columns",
    "sum_rows",
    "tanh",
    "tensordot",
    "to_host",
    "transpose",
    "uniform",
]


def _new(t: Tensor, arr: Any) -> Tensor:
    """Wrap a result array on ``t``'s device (no autograd record)."""
    return Tensor.wrap(arr, t.device)


def _operand(t: Tensor, x: Any) -> Any:
    """The array (or scalar) behind a Tensor or number operand."""
    return x.data if isinstance(x, Tensor) else x


# ----- wrapping, sizes and copies ------------------------------------------------------
def from_raw_tensor(t: Any) -> Tensor:
    """A Tensor wrapping an existing numpy or cupy array without copying it.

    SINGA passes its C++ tensor here; the arrays are this package's raw tensors. A view
    of a numpy subclass (such as the gradients an operator's ``backward`` returns to a
    direct call) is wrapped as the plain ndarray over the same memory.
    """
    from singa import device as _device

    if isinstance(t, Tensor):
        return t
    if not hasattr(t, "shape") or not hasattr(t, "dtype"):
        raise TypeError(f"from_raw_tensor: expected a numpy or cupy array, got {type(t).__name__}")
    if isinstance(t, np.ndarray) and type(t) is not np.ndarray:
        t = t.view(np.ndarray)
    return Tensor.wrap(t, _device.device_of(t))


def from_raw_tensors(tt: Any) -> list[Tensor]:
    """:func:`from_raw_tensor` applied to each array of a sequence."""
    return [from_raw_tensor(t) for t in tt]


def product(shape: Any) -> int:
    """The number of elements of a shape (the product of its sizes; 1 for ``()``)."""
    return int(math.prod(int(s) for s in shape))


def sizeof(dtype: Any) -> int:
    """Bytes per element of ``dtype``."""
    return int(np.dtype(dtype).itemsize)


def contiguous(t: Tensor) -> Tensor:
    """A tensor with ``t``'s values in a C-ordered buffer of its own."""
    return _new(t, t.device.xp.ascontiguousarray(t.data).copy())


def reshape(t: Tensor, shape: Any) -> Tensor:
    """``t`` in a new shape with the same number of elements (differentiable)."""
    return t.reshape(tuple(shape))


def transpose(t: Tensor, axes: Any = None) -> Tensor:
    """``t`` with its axes permuted (reversed when ``axes`` is None; differentiable)."""
    if axes is not None and len(axes) != t.ndim():
        raise ValueError(f"transpose: axes {tuple(axes)} do not match a {t.ndim()}-d tensor")
    return t.transpose(None if axes is None else tuple(axes))


def _flat_view(t: Tensor) -> Any:
    """A flat view of ``t``'s buffer; raises when its layout has no flat view."""
    flat = t.data.reshape(-1)
    if t.data.size and not t.device.xp.shares_memory(flat, t.data):
        raise ValueError("copy_data_to_from: the destination is not contiguous; call contiguous() first")
    return flat


def copy_data_to_from(dst: Tensor, src: Tensor, size: int, dst_offset: int = 0, src_offset: int = 0) -> None:
    """Copy ``size`` elements (in flat order) from ``src`` into ``dst``, across devices.

    Raises ValueError, before writing, when either range runs past its tensor.
    """
    if size < 0 or dst_offset < 0 or src_offset < 0:
        raise ValueError("copy_data_to_from: size and offsets must not be negative")
    if src_offset + size > src.size() or dst_offset + size > dst.size():
        raise ValueError(
            f"copy_data_to_from: {size} elements from offset {src_offset} of a {src.size()}-element "
            f"source into offset {dst_offset} of a {dst.size()}-element destination do not fit"
        )
    part = src.data.reshape(-1)[src_offset : src_offset + size]
    if dst.device.xp is np and not isinstance(part, np.ndarray):
        part = part.get()
    elif dst.device.xp is not np:
        part = dst.device.xp.asarray(part)
    _flat_view(dst)[dst_offset : dst_offset + size] = part


def copy_from_numpy(data: Tensor, np_array: Any) -> Tensor:
    """Copy a numpy array (same number of elements) into tensor ``data``. Returns it."""
    return data.copy_from_numpy(np.asarray(np_array))


def to_host(t: Tensor) -> Tensor:
    """A copy of ``t`` on the CPU (``t`` itself is left where it is)."""
    return t.clone().to_host()


def concatenate(tensors: Any, axis: int) -> Tensor:
    """Join tensors along ``axis`` (all other sizes must agree)."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("concatenate: no tensors given")
    xp = tensors[0].device.xp
    return _new(tensors[0], xp.concatenate([t.data for t in tensors], axis=axis))


def repeat(t: Tensor, repeats: Any, axis: int | None = None) -> Tensor:
    """Repeat elements as :func:`numpy.repeat` (flattened when ``axis`` is None)."""
    return t.repeat(repeats, axis)


# ----- elementwise math --------------------------------------------------------------
def _unary(name: str, doc: str) -> Any:
    def fn(t: Tensor) -> Tensor:
        return _new(t, getattr(t.device.xp, name)(t.data))

    fn.__doc__ = doc
    fn.__name__ = fn.__qualname__ = name
    return fn


abs = _unary("abs", "Elementwise ``|t|``.")
exp = _unary("exp", "Elementwise ``e ** t``.")
ceil = _unary("ceil", "Elementwise ceiling.")
log = _unary("log", "Elementwise natural logarithm.")
sign = _unary("sign", "Elementwise sign (-1, 0 or 1).")
sqrt = _unary("sqrt", "Elementwise square root.")
square = _unary("square", "Elementwise ``t * t``.")
tanh = _unary("tanh", "Elementwise hyperbolic tangent.")


def sigmoid(t: Tensor) -> Tensor:
    """Elementwise ``1 / (1 + exp(-t))``."""
    xp = t.device.xp
    return _new(t, (1 / (1 + xp.exp(-t.data))).astype(t.dtype, copy=False))


def pow(t: Tensor, x: Any, out: Tensor | None = None) -> Tensor:
    """``t ** x`` elementwise (``x`` a number or a tensor); written into ``out`` when given."""
    res = t.device.xp.power(t.data, _operand(t, x))
    return _store(t, res, out)


def _store(t: Tensor, res: Any, out: Tensor | None) -> Tensor:
    """Return ``res`` as a new tensor, or copy it into ``out`` (shapes must match)."""
    if out is None:
        return _new(t, res)
    if tuple(out.shape) != tuple(res.shape):
        raise ValueError(f"out has shape {out.shape}, the result has shape {res.shape}")
    out.data[...] = res
    return out


def softmax(t: Tensor, out: Tensor | None = None) -> Tensor:
    """Softmax of each row: over all axes after the first (the whole vector for 1-d)."""
    xp = t.device.xp
    rows = t.data.reshape(1 if t.ndim() < 2 else t.shape[0], -1)
    e = xp.exp(rows - rows.max(axis=1, keepdims=True))
    res = (e / e.sum(axis=1, keepdims=True)).reshape(t.shape).astype(t.dtype, copy=False)
    return _store(t, res, out)


# ----- comparisons: 1.0 where true, 0.0 where false, in t's dtype -------------------
def _compare(name: str, xp_name: str, symbol: str) -> Any:
    def fn(t: Tensor, x: Any) -> Tensor:
        res = getattr(t.device.xp, xp_name)(t.data, _operand(t, x))
        return _new(t, res.astype(t.dtype))

    fn.__doc__ = f"Elementwise ``t {symbol} x`` as 1.0 (true) or 0.0 (false) in ``t``'s dtype."
    fn.__name__ = fn.__qualname__ = name
    return fn


lt = _compare("lt", "less", "<")
le = _compare("le", "less_equal", "<=")
gt = _compare("gt", "greater", ">")
ge = _compare("ge", "greater_equal", ">=")
eq = _compare("eq", "equal", "==")


# ----- binary arithmetic with an optional result tensor ----------------------------
def _binary(name: str, xp_name: str, symbol: str) -> Any:
    def fn(lhs: Tensor, rhs: Any, ret: Tensor | None = None) -> Tensor:
        res = getattr(lhs.device.xp, xp_name)(lhs.data, _operand(lhs, rhs))
        return _store(lhs, _no_float64_from_scalar(res, lhs, rhs), ret)

    fn.__doc__ = f"Elementwise ``lhs {symbol} rhs``; written into ``ret`` when given."
    fn.__name__ = fn.__qualname__ = name
    return fn


add = _binary("add", "add", "+")
sub = _binary("sub", "subtract", "-")
eltwise_mult = _binary("eltwise_mult", "multiply", "*")
div = _binary("div", "divide", "/")


def _no_float64_from_scalar(res: Any, lhs: Tensor, rhs: Any) -> Any:
    """An int tensor with a Python float gives float32 (as SINGA), not numpy's float64."""
    if res.dtype == np.float64 and lhs.dtype != np.float64 and not isinstance(rhs, Tensor):
        return res.astype(np.float32)
    return res


def mult(A: Tensor, B: Tensor, C: Tensor | None = None, alpha: float = 1.0, beta: float = 0.0) -> Tensor:
    """Matrix product ``A @ B`` (batched for 3-d/4-d); with ``C``: ``C = alpha*A@B + beta*C``."""
    prod = A.device.xp.matmul(A.data, B.data)
    if C is None:
        return _new(A, prod)
    if tuple(C.shape) != tuple(prod.shape):
        raise ValueError(f"mult: C has shape {C.shape}, A @ B has shape {prod.shape}")
    C.data[...] = alpha * prod + beta * C.data
    return C


def axpy(alpha: float, x: Tensor, y: Tensor) -> Tensor:
    """``y += alpha * x`` in place. Returns ``y``."""
    y.data[...] = y.data + alpha * x.data
    return y


# ----- reductions --------------------------------------------------------------------
def sum(t: Tensor, axis: Any = None, out: Tensor | None = None) -> Tensor:
    """Sum over ``axis`` (an int, a tuple, or None for all elements), as :func:`numpy.sum`."""
    res = t.device.xp.sum(t.data, axis=axis)
    return _store(t, t.device.xp.asarray(res), out)


def average(t: Tensor, axis: int | None = None) -> Any:
    """Mean of all elements as a float (``axis`` None), or a tensor of means along ``axis``."""
    if axis is None:
        return float(t.data.mean())
    return _new(t, t.data.mean(axis=axis).astype(t.dtype, copy=False))


def sum_columns(M: Tensor) -> Tensor:
    """Sum each row of a matrix into one column: shape ``(rows, 1)``."""
    _check_matrix(M, "sum_columns")
    return _new(M, M.data.sum(axis=1, keepdims=True))


def sum_rows(M: Tensor) -> Tensor:
    """Sum each column of a matrix into one row: shape ``(1, cols)``."""
    _check_matrix(M, "sum_rows")
    return _new(M, M.data.sum(axis=0, keepdims=True))


def _check_matrix(M: Tensor, fn: str) -> None:
    if M.ndim() != 2:
        raise ValueError(f"{fn}: expected a 2-d tensor, got shape {M.shape}")


def add_column(alpha: float, v: Tensor, beta: float, M: Tensor) -> Tensor:
    """``M = alpha * v + beta * M`` with ``v`` added to every column. Returns ``M``."""
    _check_matrix(M, "add_column")
    M.data[...] = alpha * v.data.reshape(-1, 1) + beta * M.data
    return M


def add_row(alpha: float, v: Tensor, beta: float, M: Tensor) -> Tensor:
    """``M = alpha * v + beta * M`` with ``v`` added to every row. Returns ``M``."""
    _check_matrix(M, "add_row")
    M.data[...] = alpha * v.data.reshape(1, -1) + beta * M.data
    return M


def tensordot(A: Tensor, B: Tensor, axes: Any = 2) -> Tensor:
    """Sum of products over the given axes, as :func:`numpy.tensordot`."""
    return _new(A, A.device.xp.tensordot(A.data, B.data, axes=axes))


def einsum(ops: str, *args: Tensor) -> Tensor:
    """Einstein summation over the operands' subscripts, as :func:`numpy.einsum`."""
    if not ops:
        raise ValueError("einsum: no subscripts given")
    if not args:
        raise ValueError("einsum: no operands given")
    return _new(args[0], args[0].device.xp.einsum(ops, *(a.data for a in args)))


# ----- random fills into an existing tensor ------------------------------------------
def bernoulli(p: float, t: Tensor) -> Tensor:
    """Fill ``t`` with 1 (probability ``p``) or 0. Returns ``t``."""
    return t.bernoulli(p)


def gaussian(mean: float, std: float, t: Tensor) -> Tensor:
    """Fill ``t`` with samples of N(mean, std^2). Returns ``t``."""
    return t.gaussian(mean, std)


def uniform(low: float, high: float, t: Tensor) -> Tensor:
    """Fill ``t`` with samples of U[low, high). Returns ``t``."""
    return t.uniform(low, high)
