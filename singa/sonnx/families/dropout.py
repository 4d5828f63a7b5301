"""Dropout (:mod:`singa.autograd.dropout`): ONNX export and import."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa import autograd
from singa.autograd.dropout import Dropout
from singa.sonnx.context import ExportContext, NodeContext, builds

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


# ----- tables --------------------------------------------------------------------------------
EXPORT = {
    Dropout: convert_dropout,
}

IMPORT = {
    "Dropout": handle_dropout,
}
