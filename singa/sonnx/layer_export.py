"""Recurrent layers exported as ONNX's own recurrent nodes: a ``layer.RNN``, ``LSTM`` or
``GRU`` that runs while a model is traced for export becomes one ONNX ``RNN``,
``LSTM`` or ``GRU`` node per stacked layer (both directions in one node), not the
unrolled products and gates its autograd operators record.

The tracer (:mod:`singa.sonnx.trace`) replaces the records of such a layer's forward
with one :class:`LayerCall` when the layer is called the way these nodes express: one
(seq, batch, input) tensor (batch first with ``batch_first``) and zero initial states.
Other calls (SINGA's list of steps, given states) keep the unrolled export. The
weights stay initializers under their state names; the nodes between them and the
recurrent node reorder the gates (ours: LSTM i, f, o, g and GRU r, z, n; ONNX's:
LSTM i, o, f, c and GRU z, r, h) and transpose the matrices.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.layer.rnn import LSTM, RNN, RNN_Base
from singa.layer.rnn_gru import GRU
from singa.sonnx.context import ExportContext
from singa.tensor import Tensor

#: ONNX op type and the ONNX gate order as indices into ours
_KINDS = {RNN: ("RNN", [0]), LSTM: ("LSTM", [0, 2, 1, 3]), GRU: ("GRU", [1, 0, 2])}


class LayerCall:
    """One recurrent layer's whole forward in a trace (in place of its operators).

    Attributes:
        layer: the layer; ``ins`` of the record are x and then :func:`layer_params`.
    """

    def __init__(self, layer: RNN_Base):
        self.layer = layer


def converter(op: Any) -> Any:
    """:func:`convert_layer_call` for a :class:`LayerCall`, else None."""
    return convert_layer_call if isinstance(op, LayerCall) else None


def exports_whole(layer: Any, args: tuple, kwargs: dict) -> bool:
    """Whether this call of ``layer`` is exported as ONNX recurrent nodes."""
    if type(layer) not in _KINDS or kwargs or len(args) != 1:
        return False
    x = args[0]
    return isinstance(x, Tensor) and x.ndim() == 3 and x.dtype.kind == "f"


def layer_params(layer: RNN_Base) -> list[Tensor]:
    """The parameters the converter reads, per layer and direction k: Wx, Wh, then the
    biases (RNN: b; LSTM and GRU: Bx, Bh)."""
    out = []
    for k in range(layer.num_layers * layer.num_directions):
        out += [layer.Wx[k], layer.Wh[k]]
        if layer.bias:
            out += [layer.b[k]] if isinstance(layer, RNN) else [layer.Bx[k], layer.Bh[k]]
    return out


def _onnx_matrix(ctx: ExportContext, name: str, order: list, h: int) -> str:
    """Our (in, G*H) matrix as ONNX's (G*H, in) with the gates in ONNX's order."""
    idx = np.concatenate([np.arange(g * h, (g + 1) * h) for g in order]).astype(np.int64)
    t = ctx.node("Transpose", [name], 1, perm=[1, 0])[0]
    return ctx.node("Gather", [t, ctx.const(idx, hint="gates")], 1, axis=0)[0]


def _onnx_bias(ctx: ExportContext, names: list, order: list, h: int, dtype: Any) -> str:
    """ONNX's B (2*G*H,): our input and hidden biases, gates reordered (an RNN's single
    bias goes first, zeros after)."""
    idx = np.concatenate([np.arange(g * h, (g + 1) * h) for g in order]).astype(np.int64)
    parts = [ctx.node("Gather", [n, ctx.const(idx, hint="gates")], 1, axis=0)[0] for n in names]
    if len(parts) == 1:
        parts.append(ctx.const(np.zeros(len(order) * h, dtype), hint="zeros"))
    return ctx.node("Concat", parts, 1, axis=0)[0]


def _stacked(ctx: ExportContext, names: list) -> str:
    """Tensors stacked along a new axis 0 (one per direction)."""
    axis = ctx.ints([0], "axes")
    ups = [
        ctx.node("Unsqueeze", [n, axis], 1)[0]
        if ctx.opset >= 13
        else ctx.node("Unsqueeze", [n], 1, axes=[0])[0]
        for n in names
    ]
    return ups[0] if len(ups) == 1 else ctx.node("Concat", ups, 1, axis=0)[0]


def convert_layer_call(ctx: ExportContext, op: LayerCall, ins: list, outs: list, xs: list, ys: tuple) -> None:
    """One ONNX recurrent node per stacked layer; outputs y, h_n (and c_n) as the layer
    returns them."""
    layer = op.layer
    kind, order = _KINDS[type(layer)]
    h, dirs = layer.hidden_size, layer.num_directions
    per_k = 2 + (0 if not layer.bias else 1 if isinstance(layer, RNN) else 2)
    x = ctx.node("Transpose", [ins[0]], 1, perm=[1, 0, 2])[0] if layer.batch_first else ins[0]
    finals: list[list] = [[], []]
    attrs: dict = {"hidden_size": h, "direction": "bidirectional" if dirs == 2 else "forward"}
    if kind == "GRU":
        attrs["linear_before_reset"] = 1
    if kind == "RNN":
        attrs["activations"] = ["Relu" if layer.nonlinearity == "relu" else "Tanh"] * dirs
    for lyr in range(layer.num_layers):
        ws, rs, bs = [], [], []
        for d in range(dirs):
            base = 1 + (lyr * dirs + d) * per_k
            ws.append(_onnx_matrix(ctx, ins[base], order, h))
            rs.append(_onnx_matrix(ctx, ins[base + 1], order, h))
            if layer.bias:
                bs.append(_onnx_bias(ctx, ins[base + 2 : base + per_k], order, h, xs[0].dtype))
        node_ins = [x, _stacked(ctx, ws), _stacked(ctx, rs)] + ([_stacked(ctx, bs)] if bs else [])
        n_out = 3 if kind == "LSTM" else 2
        y, *states = ctx.node(kind, node_ins, n_out, **attrs)
        for k, s in enumerate(states):
            finals[k].append(s)
        y = ctx.node("Transpose", [y], 1, perm=[0, 2, 1, 3])[0]  # (seq, batch, dirs, H)
        x = ctx.node("Reshape", [y, ctx.ints([0, 0, -1], "shape")], 1)[0]
    if layer.batch_first:
        ctx.node("Transpose", [x], [outs[0]], perm=[1, 0, 2])
    else:
        ctx.node("Identity", [x], [outs[0]])
    for k, out in enumerate(outs[1:]):
        parts = finals[k]
        if len(parts) == 1:
            ctx.node("Identity", parts, [out])
        else:
            ctx.node("Concat", parts, [out], axis=0)
