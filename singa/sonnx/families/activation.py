"""Activations (:mod:`singa.autograd.activation`): ONNX export and import."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from singa import autograd
from singa.autograd import activation as act
from singa.autograd import elementwise as ew
from singa.autograd import shaping as sh
from singa.sonnx.context import ExportContext, NodeContext, builds, unary_handler
from singa.tensor import Tensor

# ----- export --------------------------------------------------------------------------------


def _simple_converter(op_type: str):
    def convert(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
        ctx.node(op_type, ins, outs)

    convert.__name__ = f"convert_{op_type.lower()}"
    return convert


def convert_leakyrelu(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """LeakyRelu(alpha=a)."""
    ctx.node("LeakyRelu", ins, outs, alpha=float(op.a))


def convert_elu(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Elu(alpha), times ``scale`` when it is not 1."""
    if op.scale == 1.0:
        ctx.node("Elu", ins, outs, alpha=float(op.alpha))
        return
    y = ctx.node("Elu", ins, 1, alpha=float(op.alpha))[0]
    ctx.node("Mul", [y, ctx.const(np.asarray(op.scale, dtype=xs[0].dtype))], outs)


def convert_selu(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Selu(alpha, gamma)."""
    ctx.node("Selu", ins, outs, alpha=float(op.alpha), gamma=float(op.gamma))


def convert_hardsigmoid(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """HardSigmoid(alpha, beta)."""
    ctx.node("HardSigmoid", ins, outs, alpha=float(op.alpha), beta=float(op.beta))


def convert_gelu(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Gelu (opset 20+), else its formula: 0.5 x (1 + erf(x / sqrt 2)) or the tanh form."""
    if ctx.opset >= 20:
        ctx.node("Gelu", ins, outs, approximate=op.approximate)
        return
    dt = xs[0].dtype
    x = ins[0]

    def c(v: float) -> str:
        return ctx.const(np.asarray(v, dtype=dt))

    if op.approximate == "tanh":
        x3 = ctx.node("Mul", [ctx.node("Mul", [x, x], 1)[0], x], 1)[0]
        inner = ctx.node("Add", [x, ctx.node("Mul", [x3, c(0.044715)], 1)[0]], 1)[0]
        t = ctx.node("Tanh", [ctx.node("Mul", [inner, c(math.sqrt(2.0 / math.pi))], 1)[0]], 1)[0]
    else:
        t = ctx.node("Erf", [ctx.node("Mul", [x, c(1.0 / math.sqrt(2.0))], 1)[0]], 1)[0]
    one_plus = ctx.node("Add", [t, c(1.0)], 1)[0]
    half_x = ctx.node("Mul", [x, c(0.5)], 1)[0]
    ctx.node("Mul", [half_x, one_plus], outs)


def _softmax_converter(op_type: str):
    """Softmax/LogSoftmax along ``op.axis``; before opset 13 they work on the 2-D
    coercion from ``axis``, which equals the per-axis form only for the last axis, so
    other axes are first swapped to the end."""

    def convert(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
        r = xs[0].ndim
        axis = op.axis % r if r else 0
        if ctx.opset >= 13 or axis == r - 1:
            ctx.node(op_type, ins, outs, axis=axis)
            return
        perm = list(range(r))
        perm[axis], perm[-1] = perm[-1], perm[axis]
        t = ctx.node("Transpose", ins, 1, perm=perm)[0]
        s = ctx.node(op_type, [t], 1, axis=r - 1)[0]
        ctx.node("Transpose", [s], outs, perm=perm)

    convert.__name__ = f"convert_{op_type.lower()}"
    return convert


def convert_prelu(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """PRelu(x, slope); where x itself broadcasts to the slope (SINGA's two-way
    broadcasting, which ONNX PRelu lacks) x first becomes x + (slope - slope)."""
    x = ins[0]
    if xs[0].shape != ys[0].shape:
        x = ctx.node("Add", [x, ctx.node("Sub", [ins[1], ins[1]], 1)[0]], 1)[0]
    ctx.node("PRelu", [x, ins[1]], outs)


# ----- import --------------------------------------------------------------------------------


@builds(act.LeakyReLU)
def handle_leakyrelu(ctx: NodeContext, xs: list) -> Tensor:
    """LeakyRelu(alpha=0.01)."""
    return autograd.leakyrelu(xs[0], float(ctx.attr("alpha", 0.01)))


@builds(act.Elu)
def handle_elu(ctx: NodeContext, xs: list) -> Tensor:
    """Elu(alpha=1)."""
    return autograd.elu(xs[0], float(ctx.attr("alpha", 1.0)))


@builds(act.Selu)
def handle_selu(ctx: NodeContext, xs: list) -> Tensor:
    """Selu(alpha, gamma) with ONNX's defaults."""
    return autograd.selu(
        xs[0],
        float(ctx.attr("alpha", 1.67326319217681884765625)),
        float(ctx.attr("gamma", 1.05070102214813232421875)),
    )


@builds(act.HardSigmoid)
def handle_hardsigmoid(ctx: NodeContext, xs: list) -> Tensor:
    """HardSigmoid(alpha=0.2, beta=0.5)."""
    return autograd.hardsigmoid(xs[0], float(ctx.attr("alpha", 0.2)), float(ctx.attr("beta", 0.5)))


@builds(act.Gelu)
def handle_gelu(ctx: NodeContext, xs: list) -> Tensor:
    """Gelu(approximate="none" | "tanh")."""
    return autograd.gelu(xs[0], ctx.attr("approximate", "none"))


@builds(act.PRelu)
def handle_prelu(ctx: NodeContext, xs: list) -> Tensor:
    """PRelu: x where x > 0, slope * x elsewhere (slope broadcast to x)."""
    return act.prelu(xs[0], xs[1])


def _softmax_handler(fn, op: type):
    """Softmax/LogSoftmax: along ``axis`` (opset 13+, default -1), or on the 2-D
    coercion of the input at ``axis`` (before 13, default 1)."""

    @builds(op, sh.Reshape)
    def handle(ctx: NodeContext, xs: list) -> Tensor:
        x = xs[0]
        r = x.ndim()
        if ctx.opset >= 13:
            return fn(x, axis=int(ctx.attr("axis", -1)) % max(r, 1))
        axis = int(ctx.attr("axis", 1)) % max(r, 1)
        if axis == r - 1:
            return fn(x, axis=axis)
        shape = x.shape
        x2 = autograd.reshape(x, (int(np.prod(shape[:axis])), -1))
        return autograd.reshape(fn(x2, axis=1), shape)

    return handle


@builds(ew.Mul, act.Sigmoid)
def handle_swish(ctx: NodeContext, xs: list) -> Tensor:
    """Swish: ``x * sigmoid(alpha * x)``."""
    x = xs[0]
    alpha = float(ctx.attr("alpha", 1.0))
    return ew.mul(x, act.sigmoid(ew.mul(x, ctx.const(alpha, x.dtype))))


@builds(ew.Mul, act.Sigmoid)
def handle_swiglu(ctx: NodeContext, xs: list) -> Tensor:
    """SwiGLU(A, B): ``Swish_alpha(A) * B`` (the gated unit of Llama's feed-forward)."""
    a, b = xs
    alpha = float(ctx.attr("alpha", 1.0))
    return ew.mul(ew.mul(a, act.sigmoid(ew.mul(a, ctx.const(alpha, a.dtype)))), b)


@builds(act.Elu, ew.Mul)
def handle_celu(ctx: NodeContext, xs: list) -> Tensor:
    """Celu: ``alpha * elu(x / alpha)``."""
    x = xs[0]
    alpha = float(ctx.attr("alpha", 1.0))
    y = act.elu(ew.mul(x, ctx.const(1.0 / alpha, x.dtype)), 1.0)
    return ew.mul(y, ctx.const(alpha, x.dtype))


@builds(ew.Mul)
def handle_thresholded_relu(ctx: NodeContext, xs: list) -> Tensor:
    """ThresholdedRelu: ``x`` where ``x > alpha``, else 0."""
    x = xs[0]
    mask = x.data > float(ctx.attr("alpha", 1.0))
    return ew.mul(x, ctx.wrap(mask.astype(x.dtype)))


@builds(ew.Mul, ew.Add)
def handle_shrink(ctx: NodeContext, xs: list) -> Tensor:
    """Shrink: ``x + bias`` below ``-lambd``, ``x - bias`` above ``lambd``, else 0."""
    x = xs[0]
    lambd, bias = float(ctx.attr("lambd", 0.5)), float(ctx.attr("bias", 0.0))
    xp = ctx.device.xp
    low, high = x.data < -lambd, x.data > lambd
    offset = xp.where(low, bias, 0.0) - xp.where(high, bias, 0.0)
    y = ew.add(ew.mul(x, ctx.wrap((low | high).astype(x.dtype))), ctx.wrap(offset.astype(x.dtype)))
    return y if y.dtype == x.dtype else ctx.wrap(y.data.astype(x.dtype))


# ----- tables --------------------------------------------------------------------------------
EXPORT = {
    act.ReLU: _simple_converter("Relu"),
    act.LeakyReLU: convert_leakyrelu,
    act.Elu: convert_elu,
    act.Selu: convert_selu,
    act.Sigmoid: _simple_converter("Sigmoid"),
    act.Tanh: _simple_converter("Tanh"),
    act.SoftPlus: _simple_converter("Softplus"),
    act.SoftSign: _simple_converter("Softsign"),
    act.Gelu: convert_gelu,
    act.HardSigmoid: convert_hardsigmoid,
    act.SoftMax: _softmax_converter("Softmax"),
    act.LogSoftMax: _softmax_converter("LogSoftmax"),
    act.PRelu: convert_prelu,
}

IMPORT = {
    "Relu": unary_handler(act.relu, act.ReLU),
    "LeakyRelu": handle_leakyrelu,
    "Elu": handle_elu,
    "Selu": handle_selu,
    "Sigmoid": unary_handler(act.sigmoid, act.Sigmoid),
    "Tanh": unary_handler(act.tanh, act.Tanh),
    "Softplus": unary_handler(act.softplus, act.SoftPlus),
    "Softsign": unary_handler(act.softsign, act.SoftSign),
    "Gelu": handle_gelu,
    "HardSigmoid": handle_hardsigmoid,
    "PRelu": handle_prelu,
    "Softmax": _softmax_handler(act.softmax, act.SoftMax),
    "LogSoftmax": _softmax_handler(act.log_softmax, act.LogSoftMax),
    "Swish": handle_swish,
    "SwiGLU": handle_swiglu,
    "Celu": handle_celu,
    "ThresholdedRelu": handle_thresholded_relu,
    "Shrink": handle_shrink,
}
