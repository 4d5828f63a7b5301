"""Import handlers of ONNX operators whose values have no gradient and are computed
directly when the node runs (indices, integer bit operations, tests of values,
generated ranges): part of the ``shape`` family's import table, which holds the
operator-less handlers (see :mod:`singa.sonnx.families`)."""

from __future__ import annotations

import numpy as np

from singa.sonnx.context import NodeContext, builds, np_dtype
from singa.tensor import Tensor


def _arg_handler(pick: str):
    @builds()
    def handle(ctx: NodeContext, xs: list) -> Tensor:
        xp = ctx.device.xp
        a = xs[0].data
        axis = int(ctx.attr("axis", 0)) % a.ndim
        if int(ctx.attr("select_last_index", 0)):
            a = xp.flip(a, axis)
        idx = getattr(xp, pick)(a, axis=axis)
        if int(ctx.attr("select_last_index", 0)):
            idx = a.shape[axis] - 1 - idx
        if int(ctx.attr("keepdims", 1)):
            idx = xp.expand_dims(idx, axis)
        return ctx.wrap(xp.asarray(idx, dtype=np.int64))

    handle.__doc__ = f"{pick[3:].capitalize()}: the index of the {pick[3:]} along ``axis`` (int64)."
    return handle


@builds()
def handle_range(ctx: NodeContext, xs: list) -> Tensor:
    """Range(start, limit, delta): ``max(ceil((limit - start) / delta), 0)`` values."""
    start, limit, delta = (ctx.static(x).reshape(()) for x in xs)
    n = max(int(np.ceil((limit - start) / delta)), 0)
    y = start + np.arange(n, dtype=np.float64 if start.dtype.kind == "f" else np.int64) * delta
    return ctx.const(y.astype(start.dtype))


@builds()
def handle_eye_like(ctx: NodeContext, xs: list) -> Tensor:
    """EyeLike: ones on diagonal ``k`` of a 2-D tensor shaped like the input."""
    x = xs[0]
    dt = np_dtype(ctx, int(ctx.attr("dtype"))) if ctx.attr("dtype") is not None else x.dtype
    rows, cols = x.shape
    return ctx.wrap(ctx.device.xp.eye(rows, cols, k=int(ctx.attr("k", 0)), dtype=dt))


@builds()
def handle_isinf(ctx: NodeContext, xs: list) -> Tensor:
    """IsInf: True at +inf (``detect_positive``) and -inf (``detect_negative``)."""
    a = xs[0].data
    pos = int(ctx.attr("detect_positive", 1))
    neg = int(ctx.attr("detect_negative", 1))
    return ctx.wrap((a == np.inf) & bool(pos) | (a == -np.inf) & bool(neg))


@builds()
def handle_isnan(ctx: NodeContext, xs: list) -> Tensor:
    """IsNaN: True where the input is NaN."""
    return ctx.wrap(ctx.device.xp.isnan(xs[0].data))


@builds()
def handle_bit_shift(ctx: NodeContext, xs: list) -> Tensor:
    """BitShift of unsigned integers ``direction`` LEFT or RIGHT."""
    xp = ctx.device.xp
    a, b = xs[0].data, xs[1].data
    left = ctx.attr("direction") == "LEFT"
    y = xp.left_shift(a, b) if left else xp.right_shift(a, b)
    return ctx.wrap(y.astype(a.dtype))


def _bitwise_handler(name: str):
    @builds()
    def handle(ctx: NodeContext, xs: list) -> Tensor:
        fn = getattr(ctx.device.xp, name)
        return ctx.wrap(fn(*(x.data for x in xs)))

    handle.__doc__ = f"numpy's {name} of integer (or bool) inputs."
    return handle


@builds()
def handle_hardmax(ctx: NodeContext, xs: list) -> Tensor:
    """Hardmax: 1 at the first maximum along ``axis`` (default -1), 0 elsewhere."""
    xp = ctx.device.xp
    a = xs[0].data
    axis = int(ctx.attr("axis", -1)) % a.ndim
    idx = xp.expand_dims(xp.argmax(a, axis=axis), axis)
    y = xp.zeros_like(a)
    xp.put_along_axis(y, idx, 1, axis=axis)
    return ctx.wrap(y)


@builds()
def handle_bitcast(ctx: NodeContext, xs: list) -> Tensor:
    """BitCast(to): the input's bytes read as another type of the same size."""
    a = xs[0].data
    dt = np_dtype(ctx, int(ctx.attr("to")))
    if dt.itemsize != a.dtype.itemsize:
        raise ctx.unsupported(f"bit cast from {a.dtype} to {dt} (sizes differ)")
    return ctx.wrap(a.copy().view(dt))


IMPORT = {
    "ArgMax": _arg_handler("argmax"),
    "ArgMin": _arg_handler("argmin"),
    "Range": handle_range,
    "EyeLike": handle_eye_like,
    "IsInf": handle_isinf,
    "IsNaN": handle_isnan,
    "BitShift": handle_bit_shift,
    "BitwiseAnd": _bitwise_handler("bitwise_and"),
    "BitwiseOr": _bitwise_handler("bitwise_or"),
    "BitwiseXor": _bitwise_handler("bitwise_xor"),
    "BitwiseNot": _bitwise_handler("bitwise_not"),
    "Hardmax": handle_hardmax,
    "BitCast": handle_bitcast,
}
