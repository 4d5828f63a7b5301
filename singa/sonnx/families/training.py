"""ONNX's ``ai.onnx.preview.training`` domain: the optimizer steps Adagrad, Adam and
Momentum (standard and Nesterov) as operators, computed when the node runs (they are
updates, not differentiable functions), as ONNX's reference computes them.

Each takes R (learning rate), T (the step count), then the tensors X..., their
gradients G... and accumulators, for any number of tensors, and returns the new X...
then the new accumulators. ``IMPORT`` (the default domain) is empty.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from singa.sonnx.context import NodeContext, builds, inference_only

DOMAIN = "ai.onnx.preview.training"


def _groups(ctx: NodeContext, xs: list, per: int) -> tuple[float, int, list[list[np.ndarray]]]:
    """R, T and the per-tensor lists (X, G, accumulators...) of an optimizer node."""
    arrays = [np.asarray(ctx.static(x)) for x in xs]
    n, rest = divmod(len(arrays) - 2, per)
    if rest or n < 1:
        raise ValueError(
            f"ONNX run: {ctx.op_type} node {ctx.name!r}: {len(arrays)} inputs, expected 2 + {per} x N"
        )
    r, t = float(arrays[0].reshape(())), int(arrays[1].reshape(()))
    return r, t, [[arrays[2 + j * n + i] for j in range(per)] for i in range(n)]


def _run(ctx: NodeContext, xs: list, per: int, step: Callable) -> list:
    """The new X... then each accumulator's new values, computed in float64 by ``step``
    and returned in the inputs' dtypes."""
    inference_only(ctx, xs, "optimizer steps")
    r, t, groups = _groups(ctx, xs, per)
    updated = [step(r, t, *(a.astype(np.float64) for a in g)) for g in groups]
    sources = [0, *range(2, per)]  # X, then the accumulators (index 1 is G)
    return [
        ctx.const(new[k].astype(g[src].dtype))
        for k, src in enumerate(sources)
        for g, new in zip(groups, updated)
    ]


@builds()
def handle_adagrad(ctx: NodeContext, xs: list) -> list:
    """Adagrad(R, T, X..., G..., H...; decay_factor, epsilon, norm_coefficient)."""
    decay, eps = float(ctx.attr("decay_factor", 0.0)), float(ctx.attr("epsilon", 0.0))
    norm = float(ctx.attr("norm_coefficient", 0.0))

    def step(r, t, x, g, h):
        g = norm * x + g
        h = h + g * g
        return x - r / (1 + t * decay) * g / (np.sqrt(h) + eps), h

    return _run(ctx, xs, 3, step)


@builds()
def handle_adam(ctx: NodeContext, xs: list) -> list:
    """Adam(R, T, X..., G..., V..., H...; alpha, beta, epsilon, norm_coefficient,
    norm_coefficient_post): bias-corrected after the first step (T > 0)."""
    alpha, beta = float(ctx.attr("alpha", 0.9)), float(ctx.attr("beta", 0.999))
    eps, norm = float(ctx.attr("epsilon", 0.0)), float(ctx.attr("norm_coefficient", 0.0))
    post = float(ctx.attr("norm_coefficient_post", 0.0))

    def step(r, t, x, g, v, h):
        g = norm * x + g
        v = alpha * v + (1 - alpha) * g
        h = beta * h + (1 - beta) * g * g
        rate = r * np.sqrt(1 - beta**t) / (1 - alpha**t) if t > 0 else r
        return (1 - post) * (x - rate * v / (np.sqrt(h) + eps)), v, h

    return _run(ctx, xs, 4, step)


@builds()
def handle_momentum(ctx: NodeContext, xs: list) -> list:
    """Momentum(R, T, X..., G..., V...; alpha, beta, mode standard or nesterov,
    norm_coefficient): the gradient's coefficient is 1 on the first step (T = 0)."""
    alpha, beta = float(ctx.attr("alpha")), float(ctx.attr("beta"))
    norm, mode = float(ctx.attr("norm_coefficient")), ctx.attr("mode")
    if mode not in ("standard", "nesterov"):
        raise ctx.unsupported(f"mode {mode!r} (standard or nesterov)")

    def step(r, t, x, g, v):
        g = norm * x + g
        v = alpha * v + (beta if t > 0 else 1.0) * g
        return (x - r * v if mode == "standard" else x - r * (g + alpha * v)), v

    return _run(ctx, xs, 3, step)


EXPORT: dict = {}
IMPORT: dict = {}
DOMAIN_IMPORT = {"Adagrad": handle_adagrad, "Adam": handle_adam, "Momentum": handle_momentum}
