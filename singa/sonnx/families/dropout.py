"""Dropout (:mod:`singa.autograd.dropout`): ONNX export and import; and the import of
ONNX's random generators (Bernoulli, RandomUniform, RandomNormal and their ``Like``
forms), values computed when the node runs, without a gradient: drawn from the node's
generator (seeded by its ``seed`` attribute) or else the device's."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa import autograd
from singa.autograd.dropout import Dropout
from singa.sonnx.context import ExportContext, NodeContext, builds, np_dtype
from singa.tensor import Tensor

# ----- export --------------------------------------------------------------------------------


def convert_dropout(ctx: ExportContext, op: Any, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """Identity when not training (or ratio 0); else Dropout(ratio, training_mode)."""
    if not op.training or op.ratio == 0.0:
        ctx.node("Identity", ins, outs)
        return
    ratio = ctx.const(np.asarray(op.ratio, dtype=xs[0].dtype), hint="ratio")
    ctx.node("Dropout", [ins[0], ratio, ctx.const(np.asarray(True), hint="training_mode")], outs)


# ----- import --------------------------------------------------------------------------------


@builds(Dropout)
def handle_dropout(ctx: NodeContext, xs: list) -> Any:
    """Dropout: the identity unless training (``training_mode`` input, or a SONNXModel
    in train()); the optional mask output is boolean."""
    x = xs[0]
    ratio = float(ctx.static(xs[1]).reshape(())) if len(xs) > 1 and xs[1] is not None else 0.5
    training = ctx.training
    if len(xs) > 2 and xs[2] is not None:
        training = training or bool(ctx.static(xs[2]).reshape(()))
    if not training or ratio == 0.0:
        y = x
        mask = ctx.const(np.ones(x.shape, dtype=bool))
    else:
        y = autograd.dropout(x, ratio, training=True)
        mask = ctx.wrap(y.data != 0)
    return [y, mask] if ctx.outputs > 1 else y


def _draw(ctx: NodeContext, dist: str, shape: tuple, dtype: Any, a: float, b: float) -> Tensor:
    """``dist`` ("uniform" in [a, b), "normal" of mean a and scale b) values of ``shape``
    drawn in float64 for float64 outputs, else float32, and cast to ``dtype``."""
    rng = ctx.generator()
    rdt = np.float64 if np.dtype(dtype) == np.float64 else np.float32
    shape = tuple(int(d) for d in shape)
    if dist == "uniform":
        u = rng.random(shape, dtype=rdt) * rdt(b - a) + rdt(a)
    else:
        u = rng.standard_normal(shape, dtype=rdt) * rdt(b) + rdt(a)
    u = u.astype(dtype)
    return ctx.wrap(u) if rng is ctx.device.rng else ctx.const(u)


def _out_dtype(ctx: NodeContext, default: Any) -> Any:
    dt = ctx.attr("dtype")
    return np.dtype(default) if dt is None else np_dtype(ctx, int(dt))


def _params(ctx: NodeContext, dist: str) -> tuple[float, float]:
    if dist == "uniform":
        return float(ctx.attr("low", 0.0)), float(ctx.attr("high", 1.0))
    return float(ctx.attr("mean", 0.0)), float(ctx.attr("scale", 1.0))


def _random_handler(dist: str, like: bool):
    @builds()
    def handle(ctx: NodeContext, xs: list) -> Tensor:
        if like:
            shape, dtype = xs[0].shape, _out_dtype(ctx, xs[0].dtype)
        else:
            shape, dtype = ctx.attr("shape"), _out_dtype(ctx, np.float32)
        if dtype.kind != "f":
            raise ctx.unsupported(f"random values of type {dtype} (a float type is needed)")
        return _draw(ctx, dist, shape, dtype, *_params(ctx, dist))

    where = (
        "shaped like the input (its dtype unless ``dtype``)" if like else "of ``shape`` (``dtype``, float32)"
    )
    what = "uniform in [low, high)" if dist == "uniform" else "normal of ``mean`` and ``scale``"
    handle.__doc__ = f"Random{dist.capitalize()}{'Like' if like else ''}: values {what} {where}."
    return handle


@builds()
def handle_bernoulli(ctx: NodeContext, xs: list) -> Tensor:
    """Bernoulli: 1 with the probability the input gives, else 0 (``dtype``, default the
    input's): a uniform draw ``u`` in [0, 1) gives 1 where ``u < p``."""
    p = xs[0]
    dtype = _out_dtype(ctx, p.dtype)
    rdt = np.float64 if p.dtype == np.float64 else np.float32
    u = _draw(ctx, "uniform", p.shape, rdt, 0.0, 1.0)
    return ctx.wrap((u.data < p.data.astype(rdt)).astype(dtype))


# ----- tables --------------------------------------------------------------------------------
EXPORT = {
    Dropout: convert_dropout,
}

IMPORT = {
    "Dropout": handle_dropout,
    "Bernoulli": handle_bernoulli,
    "RandomUniform": _random_handler("uniform", like=False),
    "RandomUniformLike": _random_handler("uniform", like=True),
    "RandomNormal": _random_handler("normal", like=False),
    "RandomNormalLike": _random_handler("normal", like=True),
}
