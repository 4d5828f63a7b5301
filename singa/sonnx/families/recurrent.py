"""Recurrent networks: ONNX RNN, GRU and LSTM, unrolled over the sequence with autograd
operators (products, sigmoid, tanh, relu, elementwise arithmetic), so an imported
recurrent model fine-tunes.

Every form of the operators is read: ``direction`` forward, reverse or bidirectional,
``layout`` 0 (seq, batch, feature) or 1 (batch, seq, feature), biases, initial states,
``sequence_lens`` (steps past a sequence's length keep its state and output zeros),
LSTM peepholes and ``input_forget``, GRU ``linear_before_reset``, ``clip`` and the
activations Sigmoid, Tanh and Relu. ONNX's gate orders: LSTM i, o, f, c; GRU z, r, h.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from singa import autograd
from singa.autograd import activation as act
from singa.autograd import elementwise as ew
from singa.autograd import linalg
from singa.autograd import shaping as sh
from singa.sonnx.context import NodeContext, builds
from singa.tensor import Tensor

_ACTIVATIONS: dict[str, Callable] = {
    "Sigmoid": autograd.sigmoid,
    "Tanh": autograd.tanh,
    "Relu": autograd.relu,
}
_OPS = (
    linalg.MatMul,
    ew.Add,
    ew.Sub,
    ew.Mul,
    act.Sigmoid,
    act.Tanh,
    act.ReLU,
    sh.Slice,
    sh.Squeeze,
    sh.Transpose,
)
_OPS += (sh.Unsqueeze, sh.Cat, ew.Clip)


def _row(t: Tensor, i: int, axis: int = 0) -> Tensor:
    """``t`` at index ``i`` of ``axis``, the axis dropped."""
    return autograd.squeeze(autograd.slice(t, [i], [i + 1], [axis]), [axis])


def _part(t: Tensor, k: int, h: int) -> Tensor:
    """Gate block ``k`` (width ``h``) of the last axis."""
    return autograd.slice(t, [k * h], [(k + 1) * h], [t.ndim() - 1])


def _stack(items: list, axis: int) -> Tensor:
    return autograd.cat([autograd.unsqueeze(t, [axis]) for t in items], axis)


class _Spec:
    """What every recurrent node shares: sizes, weights per direction, steps, masks."""

    def __init__(self, ctx: NodeContext, xs: list, gates: int, default_acts: list):
        self.ctx = ctx
        x = xs[0]
        self.layout = int(ctx.attr("layout", 0))
        self.x = autograd.transpose(x, [1, 0, 2]) if self.layout else x  # (seq, batch, in)
        self.h = int(ctx.attr("hidden_size"))
        self.g = gates
        direction = ctx.attr("direction", "forward")
        self.reverse = [direction == "reverse"] if direction != "bidirectional" else [False, True]
        self.w, self.r = xs[1], xs[2]
        self.b = xs[3] if len(xs) > 3 and xs[3] is not None else None
        self.seq, self.batch = self.x.shape[0], self.x.shape[1]
        lens = ctx.static(xs[4]) if len(xs) > 4 and xs[4] is not None else None
        self.masks = None
        if lens is not None and (lens.reshape(-1) < self.seq).any():
            steps = np.arange(self.seq)[:, None] < lens.reshape(1, -1)
            self.masks = [ctx.const(steps[t][:, None].astype(x.dtype)) for t in range(self.seq)]
        names = ctx.attr("activations") or default_acts * len(self.reverse)
        unknown = [a for a in names if a not in _ACTIVATIONS]
        if unknown:
            raise ctx.unsupported(f"activations {unknown} (Sigmoid, Tanh and Relu are supported)")
        if ctx.attr("activation_alpha") or ctx.attr("activation_beta"):
            raise ctx.unsupported("activation_alpha / activation_beta")
        per = len(default_acts)
        self.acts = [
            [_ACTIVATIONS[a] for a in names[d * per : (d + 1) * per]] for d in range(len(self.reverse))
        ]
        self.clip = ctx.attr("clip")
        self.xs = [_row(self.x, t) for t in range(self.seq)]

    def state(self, xs: list, i: int, d: int) -> Tensor:
        """Initial state input ``i`` for direction ``d`` (zeros when absent)."""
        if len(xs) > i and xs[i] is not None:
            s = xs[i]
            return _row(autograd.transpose(s, [1, 0, 2]) if self.layout else s, d)
        return self.ctx.const(np.zeros((self.batch, self.h), self.x.dtype))

    def projections(self, d: int) -> tuple[list, Tensor, Tensor | None]:
        """x_t W^T + Wb for every step, R^T, and Rb for direction ``d``."""
        wt = autograd.transpose(_row(self.w, d), [1, 0])
        rt = autograd.transpose(_row(self.r, d), [1, 0])
        wb = rb = None
        if self.b is not None:
            bd = _row(self.b, d)
            wb, rb = _part(bd, 0, self.g * self.h), _part(bd, 1, self.g * self.h)
        proj = []
        for x_t in self.xs:
            p = autograd.matmul(x_t, wt)
            proj.append(ew.add(p, wb) if wb is not None else p)
        return proj, rt, rb

    def gate(self, v: Tensor) -> Tensor:
        return v if self.clip is None else autograd.clip(v, -float(self.clip), float(self.clip))

    def order(self, d: int) -> range:
        return range(self.seq - 1, -1, -1) if self.reverse[d] else range(self.seq)

    def keep(self, t: int, new: Tensor, old: Tensor) -> Tensor:
        """``new`` where step t is inside its sequence, else ``old``."""
        if self.masks is None:
            return new
        m = self.masks[t]
        return ew.add(ew.mul(m, new), ew.mul(ew.sub(self.ctx.const(1.0, m.dtype), m), old))

    def output(self, t: int, h: Tensor) -> Tensor:
        return h if self.masks is None else ew.mul(self.masks[t], h)

    def finish(self, ys: list, finals: list) -> list:
        """Y (seq, dirs, batch, H) and the final states (dirs, batch, H), in the layout."""
        y = _stack([_stack(per_dir, 0) for per_dir in ys], 1)
        outs = [y] + [_stack(f, 0) for f in finals]
        if self.layout:
            outs = [autograd.transpose(outs[0], [2, 0, 1, 3])] + [
                autograd.transpose(o, [1, 0, 2]) for o in outs[1:]
            ]
        return outs[: max(self.ctx.outputs, 1)]


def _recur(spec: _Spec, xs: list, step: Callable, n_states: int) -> list:
    """Run ``step(spec, d, t, x_proj_t, rt, rb, states) -> states`` over every direction."""
    ys, finals = [], [[] for _ in range(n_states)]
    for d in range(len(spec.reverse)):
        proj, rt, rb = spec.projections(d)
        states = [spec.state(xs, 5 + k, d) for k in range(n_states)]
        out = [None] * spec.seq
        for t in spec.order(d):
            new = step(spec, d, proj[t], rt, rb, states)
            states = [spec.keep(t, n, o) for n, o in zip(new, states)]
            out[t] = spec.output(t, new[0])
        ys.append(out)
        for k in range(n_states):
            finals[k].append(states[k])
    return spec.finish(ys, finals)


def _rnn_step(spec: _Spec, d: int, xp: Tensor, rt: Tensor, rb, states: list) -> list:
    v = ew.add(xp, autograd.matmul(states[0], rt))
    v = ew.add(v, rb) if rb is not None else v
    return [spec.acts[d][0](spec.gate(v))]


def _gru_step(spec: _Spec, d: int, xp: Tensor, rt: Tensor, rb, states: list) -> list:
    h, hs = states[0], spec.h
    f, g = spec.acts[d]
    hr = autograd.matmul(h, rt)
    hr = ew.add(hr, rb) if rb is not None else hr
    z = f(spec.gate(ew.add(_part(xp, 0, hs), _part(hr, 0, hs))))
    r = f(spec.gate(ew.add(_part(xp, 1, hs), _part(hr, 1, hs))))
    if int(spec.ctx.attr("linear_before_reset", 0)):
        cand = ew.add(_part(xp, 2, hs), ew.mul(r, _part(hr, 2, hs)))
    else:
        rh = autograd.matmul(ew.mul(r, h), _part(rt, 2, hs))
        cand = ew.add(_part(xp, 2, hs), rh)
        if rb is not None:
            cand = ew.add(cand, _part(rb, 2, hs))
    cand = g(spec.gate(cand))
    one = spec.ctx.const(1.0, h.dtype)
    return [ew.add(ew.mul(ew.sub(one, z), cand), ew.mul(z, h))]


def _lstm_step(spec: _Spec, d: int, xp: Tensor, rt: Tensor, rb, states: list) -> list:
    h, c = states
    hs = spec.h
    f, g, hact = spec.acts[d]
    v = ew.add(xp, autograd.matmul(h, rt))
    v = ew.add(v, rb) if rb is not None else v
    peep = spec.peepholes[d]
    pre_i, pre_o, pre_f = _part(v, 0, hs), _part(v, 1, hs), _part(v, 2, hs)
    if peep is not None:
        pre_i, pre_f = ew.add(pre_i, ew.mul(peep[0], c)), ew.add(pre_f, ew.mul(peep[2], c))
    i = f(spec.gate(pre_i))
    fg = (
        ew.sub(spec.ctx.const(1.0, h.dtype), i)
        if int(spec.ctx.attr("input_forget", 0))
        else f(spec.gate(pre_f))
    )
    c_new = ew.add(ew.mul(fg, c), ew.mul(i, g(spec.gate(_part(v, 3, hs)))))
    if peep is not None:
        pre_o = ew.add(pre_o, ew.mul(peep[1], c_new))
    o = f(spec.gate(pre_o))
    return [ew.mul(o, hact(c_new)), c_new]


@builds(*_OPS)
def handle_rnn(ctx: NodeContext, xs: list) -> list:
    """RNN: H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb)."""
    return _recur(_Spec(ctx, xs, 1, ["Tanh"]), xs, _rnn_step, 1)


@builds(*_OPS)
def handle_gru(ctx: NodeContext, xs: list) -> list:
    """GRU (gates z, r, h) with ``linear_before_reset``."""
    return _recur(_Spec(ctx, xs, 3, ["Sigmoid", "Tanh"]), xs, _gru_step, 1)


@builds(*_OPS)
def handle_lstm(ctx: NodeContext, xs: list) -> list:
    """LSTM (gates i, o, f, c) with peepholes P (i, o, f) and ``input_forget``."""
    spec = _Spec(ctx, xs, 4, ["Sigmoid", "Tanh", "Tanh"])
    p = xs[7] if len(xs) > 7 and xs[7] is not None else None
    spec.peepholes = [
        None if p is None else [_part(_row(p, d), k, spec.h) for k in range(3)]
        for d in range(len(spec.reverse))
    ]
    return _recur(spec, xs, _lstm_step, 2)


EXPORT: dict = {}
IMPORT = {"RNN": handle_rnn, "GRU": handle_gru, "LSTM": handle_lstm}
