"""ONNX converters for :mod:`singa.autograd.activation`."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from singa.autograd import activation as act
from singa.sonnx.export import ExportContext


def _simple(op_type: str):
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


def _softmax_like(op_type: str):
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


CONVERTERS = {
    act.ReLU: _simple("Relu"),
    act.LeakyReLU: convert_leakyrelu,
    act.Elu: convert_elu,
    act.Selu: convert_selu,
    act.Sigmoid: _simple("Sigmoid"),
    act.Tanh: _simple("Tanh"),
    act.SoftPlus: _simple("Softplus"),
    act.SoftSign: _simple("Softsign"),
    act.Gelu: convert_gelu,
    act.HardSigmoid: convert_hardsigmoid,
    act.SoftMax: _softmax_like("Softmax"),
    act.LogSoftMax: _softmax_like("LogSoftmax"),
}
