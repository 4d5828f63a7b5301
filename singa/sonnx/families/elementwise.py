"""Elementwise arithmetic (:mod:`singa.autograd.elementwise`): ONNX export and import."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
from onnx import helper

from singa.autograd import elementwise as ew
from singa.sonnx.context import (
    NUMPY_TYPES,
    ExportContext,
    NodeContext,
    builds,
    cast_to,
    keep_dtype,
    onnx_dtype,
    unary_handler,
)
from singa.sonnx.values import takes_any_value
from singa.tensor import Tensor

# ----- export --------------------------------------------------------------------------------


def _binary_converter(op_type: str):
    def convert(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
        dt = ys[0].dtype
        a = cast_to(ctx, ins[0], xs[0].dtype, dt)
        b = cast_to(ctx, ins[1], xs[1].dtype, dt)
        ctx.node(op_type, [a, b], outs)

    convert.__name__ = f"convert_{op_type.lower()}"
    return convert


def _unary_converter(op_type: str):
    def convert(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
        ctx.node(op_type, [cast_to(ctx, ins[0], xs[0].dtype, ys[0].dtype)], outs)

    convert.__name__ = f"convert_{op_type.lower()}"
    return convert


def convert_clip(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Clip with its bounds as constant inputs (an empty name for a missing bound)."""
    dt = xs[0].dtype
    lo = "" if op.min is None else ctx.const(np.asarray(op.min, dtype=dt), hint="clip_min")
    hi = "" if op.max is None else ctx.const(np.asarray(op.max, dtype=dt), hint="clip_max")
    inputs = [ins[0], lo, hi]
    while inputs[-1] == "":
        inputs.pop()
    ctx.node("Clip", inputs, outs)


def convert_cast(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Cast(to)."""
    ctx.node("Cast", ins, outs, to=onnx_dtype(op.dtype))


# ----- import --------------------------------------------------------------------------------


def _binary_handler(fn, op: type):
    @builds(op)
    def handle(ctx: NodeContext, xs: list) -> Tensor:
        a, b = xs
        return keep_dtype(fn(a, b), a.dtype)

    return handle


@builds(ew.Div)
def handle_div(ctx: NodeContext, xs: list) -> Tensor:
    """Div; integer inputs divide with truncation, as ONNX runtimes do."""
    a, b = xs
    if a.dtype.kind in "iub" and b.dtype.kind in "iub":
        xp = ctx.device.xp
        with np.errstate(divide="ignore", invalid="ignore"):
            return ctx.wrap(xp.trunc(a.data / b.data).astype(a.dtype))
    return keep_dtype(ew.div(a, b), a.dtype)


@builds(ew.Pow)
def handle_pow(ctx: NodeContext, xs: list) -> Tensor:
    """Pow; the result has the base's type."""
    a, b = xs
    if a.dtype.kind in "iu":
        return ctx.wrap((a.data.astype(np.float64) ** b.data).astype(a.dtype))
    return keep_dtype(ew.pow(a, b), a.dtype)


@builds(ew.Clip, ew.Mul, ew.Add)
def handle_clip(ctx: NodeContext, xs: list) -> Tensor:
    """Clip with optional min/max inputs (opset 11+)."""
    x = xs[0]
    lo = ctx.static(xs[1]) if len(xs) > 1 else None
    hi = ctx.static(xs[2]) if len(xs) > 2 else None
    lo = None if lo is None else lo.reshape(()).astype(x.dtype).item()
    hi = None if hi is None else hi.reshape(()).astype(x.dtype).item()
    if lo is not None and hi is not None and lo > hi:  # ONNX: every value becomes max
        return ew.mul(x, ctx.const(0, x.dtype)) + ctx.const(hi, x.dtype)
    return keep_dtype(ew.clip(x, lo, hi), x.dtype)


def _onnx_np_dtype(ctx: NodeContext, onnx_type: int) -> np.dtype:
    """The numpy dtype (ml_dtypes' for bfloat16, float8, float4, int4, int2) of an ONNX
    element type."""
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(onnx_type))
    except Exception as e:
        raise ctx.unsupported(f"element type {onnx_type} is not supported") from e


def _cast(ctx: NodeContext, x: Tensor, dt: np.dtype) -> Tensor:
    """``x`` cast to ``dt``: an autograd Cast between numpy's types, else (the narrow types
    of ml_dtypes) a direct conversion, saturating as ONNX's ``saturate`` asks."""
    if x.dtype.name in NUMPY_TYPES and dt.name in NUMPY_TYPES:
        return ew.cast(x, dt)
    if dt.kind not in "biufV" or x.dtype.kind not in "biufV":
        raise ctx.unsupported(f"casting from {x.dtype} to {dt} is not supported")
    xp = ctx.device.xp
    a = xp.asarray(x.data)
    if a.dtype.name not in NUMPY_TYPES:
        a = a.astype(np.float32 if a.dtype.name.startswith(("float", "bfloat")) else np.int64)
    if "e8m0" in dt.name:
        return ctx.wrap(_to_e8m0(ctx, a))
    return ctx.wrap(_narrow(a, dt, bool(int(ctx.attr("saturate", 1)))))


def _to_e8m0(ctx: NodeContext, a: Any) -> Any:
    """``a`` as float8 e8m0 (powers of two; ``round_mode`` up, down or nearest), by ONNX's
    own ``numpy_helper.to_float8e8m0``."""
    try:
        from onnx.numpy_helper import to_float8e8m0
    except ImportError as e:  # onnx before 1.18
        raise ctx.unsupported("casting to float8 e8m0 needs onnx 1.18 or newer") from e
    mode = ctx.attr("round_mode", "up")
    if mode not in ("up", "down", "nearest"):
        raise ctx.unsupported(f"round_mode {mode!r} (up, down or nearest)")
    return to_float8e8m0(np.asarray(a, np.float32), bool(int(ctx.attr("saturate", 1))), mode)


def _narrow(a: Any, dt: np.dtype, saturate: bool) -> Any:
    """``a`` (a numpy type) converted to ``dt``: integers wrap around into a narrow integer
    type (as ONNX's reference does); floats beyond a narrow float type's range clip to
    its largest value when ``saturate`` (infinities too)."""
    if dt.name in NUMPY_TYPES or dt.name == "bfloat16":
        return a.astype(dt)
    if dt.name.startswith(("int", "uint")):
        info = ml_dtypes.iinfo(dt)
        lo, span = int(info.min), int(info.max) - int(info.min) + 1
        v = (np.rint(a) if a.dtype.kind == "f" else a).astype(np.int64)
        return ((v - lo) % span + lo).astype(dt)
    top = float(ml_dtypes.finfo(dt).max)
    if saturate:
        a = np.where(np.isnan(a), a, np.clip(a, -top, top))
    return a.astype(dt)


@builds(ew.Cast)
def handle_cast(ctx: NodeContext, xs: list) -> Tensor:
    """Cast(to) between numpy's numeric types and bool, and to and from ml_dtypes'
    bfloat16, float8, float4, int4 and int2 (computed directly, no gradient)."""
    return _cast(ctx, xs[0], _onnx_np_dtype(ctx, int(ctx.attr("to"))))


@builds(ew.Cast)
def handle_cast_like(ctx: NodeContext, xs: list) -> Tensor:
    """CastLike: Cast to the element type of the second input."""
    return _cast(ctx, xs[0], xs[1].dtype)


@builds(ew.Sub, ew.Mul)
def handle_mod(ctx: NodeContext, xs: list) -> Tensor:
    """Mod: the remainder with the divisor's sign (``fmod=0``, as numpy's ``mod``) or the
    dividend's (``fmod=1``, C's ``fmod``). Floats are differentiable as
    ``a - b * q`` with the quotient ``q`` (floor or truncation of a/b) held constant;
    integers are computed directly (no gradient)."""
    a, b = xs
    xp = ctx.device.xp
    fmod = int(ctx.attr("fmod", 0))
    with np.errstate(divide="ignore", invalid="ignore"):
        y = xp.fmod(a.data, b.data) if fmod else xp.mod(a.data, b.data)
        ratio = a.data / b.data
    if a.dtype.kind != "f" or not bool(xp.isfinite(ratio).all() and xp.isfinite(a.data).all()):
        # integers, and the infinities and NaNs where a quotient means nothing: no gradient
        return ctx.wrap(xp.asarray(y).astype(xp.result_type(a.data, b.data)))
    q = xp.trunc(ratio) if fmod else xp.floor(ratio)
    return keep_dtype(ew.sub(a, ew.mul(b, ctx.wrap(q.astype(a.dtype)))), a.dtype)


# ----- tables --------------------------------------------------------------------------------
_identity = unary_handler(ew.identity, ew.Identity)


@takes_any_value
@builds(ew.Identity)
def handle_identity(ctx: NodeContext, xs: list) -> Any:
    """Identity: a tensor through the Identity operator; a sequence or an optional
    (None when empty) as it is."""
    return _identity(ctx, xs) if isinstance(xs[0], Tensor) else xs[0]


EXPORT = {
    ew.Add: _binary_converter("Add"),
    ew.Sub: _binary_converter("Sub"),
    ew.Mul: _binary_converter("Mul"),
    ew.Div: _binary_converter("Div"),
    ew.Pow: _binary_converter("Pow"),
    ew.Maximum: _binary_converter("Max"),
    ew.Minimum: _binary_converter("Min"),
    ew.Neg: _unary_converter("Neg"),
    ew.Exp: _unary_converter("Exp"),
    ew.Log: _unary_converter("Log"),
    ew.Sqrt: _unary_converter("Sqrt"),
    ew.Abs: _unary_converter("Abs"),
    ew.Sign: _unary_converter("Sign"),
    ew.Clip: convert_clip,
    ew.Cast: convert_cast,
    ew.Erf: _unary_converter("Erf"),
    ew.Identity: _unary_converter("Identity"),
    ew.Reciprocal: _unary_converter("Reciprocal"),
}

IMPORT = {
    "Add": _binary_handler(ew.add, ew.Add),
    "Sub": _binary_handler(ew.sub, ew.Sub),
    "Mul": _binary_handler(ew.mul, ew.Mul),
    "Div": handle_div,
    "Pow": handle_pow,
    "Neg": unary_handler(ew.neg, ew.Neg),
    "Exp": unary_handler(ew.exp, ew.Exp),
    "Log": unary_handler(ew.log, ew.Log),
    "Sqrt": unary_handler(ew.sqrt, ew.Sqrt),
    "Abs": unary_handler(ew.abs, ew.Abs),
    "Sign": unary_handler(ew.sign, ew.Sign),
    "Erf": unary_handler(ew.erf, ew.Erf),
    "Reciprocal": unary_handler(ew.reciprocal, ew.Reciprocal),
    "Identity": handle_identity,
    "Clip": handle_clip,
    "Cast": handle_cast,
    "CastLike": handle_cast_like,
    "Mod": handle_mod,
}
