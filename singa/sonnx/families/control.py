"""Control flow: ONNX If, Loop and Scan (and, in ``DOMAIN_IMPORT``, the Scan of models
written at opset 8, with its batch axis and ``sequence_lens``; see ``singa.sonnx.opsets``).

The bodies run with the autograd operators like any graph (see
:mod:`singa.sonnx.subgraph`), so gradients flow through them: a Scan over a
recurrent cell or a Loop of layers in an imported model fine-tunes. Scan slices its
inputs and stacks its outputs with autograd operators too. If's outputs and Loop's
carried values may also be sequences and optionals (:mod:`singa.sonnx.values`); Scan
takes tensors.

The operators the bodies build are declared by the bodies' handlers; these handlers
declare only what they add (Scan's slicing and stacking) and are marked
``runs_subgraphs``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa import autograd
from singa.autograd import shaping as sh
from singa.sonnx.context import NodeContext, builds, runs_subgraphs
from singa.sonnx.opsets import OPSET8_DOMAIN
from singa.sonnx.values import takes_any_value
from singa.tensor import Tensor


@runs_subgraphs
@takes_any_value
@builds()
def handle_if(ctx: NodeContext, xs: list) -> list:
    """If(cond): the outputs of ``then_branch`` when cond is true, else of ``else_branch``."""
    cond = bool(np.asarray(ctx.static(xs[0])).reshape(-1)[0])
    branch = ctx.subgraphs["then_branch" if cond else "else_branch"]
    return branch.run([], ctx.scope, ctx.training)


def _stack(ctx: NodeContext, items: list, axis: int = 0) -> Tensor:
    """The tensors stacked along a new ``axis`` (an empty float32 tensor for none)."""
    if not items:
        return ctx.const(np.zeros((0,), np.float32))
    return autograd.cat([autograd.unsqueeze(t, [axis]) for t in items], axis)


@runs_subgraphs
@takes_any_value
@builds(sh.Unsqueeze, sh.Cat)
def handle_loop(ctx: NodeContext, xs: list) -> list:
    """Loop(M, cond, v...): runs the body while ``i < M`` (when M is given) and ``cond``
    (when given); the body maps (i, cond, v...) to (cond, v..., scan outputs...); the
    results are the final v... and each scan output stacked along a new axis 0."""
    body = ctx.subgraphs["body"]
    trip = None if xs[0] is None else int(np.asarray(ctx.static(xs[0])).reshape(-1)[0])
    cond = True if len(xs) < 2 or xs[1] is None else bool(np.asarray(ctx.static(xs[1])).reshape(-1)[0])
    state = list(xs[2:])
    n_scan = len(body.output_names) - 1 - len(state)
    scans: list[list] = [[] for _ in range(n_scan)]
    i = 0
    while cond and (trip is None or i < trip):
        outs = body.run([ctx.const(np.int64(i)), ctx.const(np.bool_(cond)), *state], ctx.scope, ctx.training)
        cond = bool(np.asarray(outs[0].to_numpy()).reshape(-1)[0])
        state = list(outs[1 : 1 + len(state)])
        for k, t in enumerate(outs[1 + len(state) :]):
            scans[k].append(t)
        i += 1
    return state + [_stack(ctx, s) for s in scans]


def _axes(ctx: NodeContext, name: str, n: int) -> list[int]:
    return [int(a) for a in ctx.attr(name, [0] * n)]


def _scan_slices(x: Tensor, axis: int, reverse: bool) -> list:
    """The slices of ``x`` along ``axis`` (that axis dropped), in scan order."""
    axis %= x.ndim()
    steps = range(x.shape[axis] - 1, -1, -1) if reverse else range(x.shape[axis])
    return [autograd.squeeze(autograd.slice(x, [t], [t + 1], [axis]), [axis]) for t in steps]


@runs_subgraphs
@builds(sh.Slice, sh.Squeeze, sh.Unsqueeze, sh.Cat)
def handle_scan(ctx: NodeContext, xs: list) -> list:
    """Scan (opset 9+): N state values then M scan inputs; each step the body maps
    (states, one slice of each scan input) to (states, scan output slices). Scan
    inputs are sliced along ``scan_input_axes`` (reversed where
    ``scan_input_directions`` is 1), outputs stacked along ``scan_output_axes``."""
    body = ctx.subgraphs["body"]
    m = int(ctx.attr("num_scan_inputs"))
    n = len(xs) - m
    state, seqs = list(xs[:n]), xs[n:]
    in_axes, in_dirs = _axes(ctx, "scan_input_axes", m), _axes(ctx, "scan_input_directions", m)
    slices = [_scan_slices(x, a, bool(d)) for x, a, d in zip(seqs, in_axes, in_dirs)]
    k = len(body.output_names) - n
    out_axes, out_dirs = _axes(ctx, "scan_output_axes", k), _axes(ctx, "scan_output_directions", k)
    state, outs = _scan_steps(ctx, body, state, slices, k)
    stacked = []
    for j, items in enumerate(outs):
        items = items[::-1] if out_dirs[j] else items
        axis = out_axes[j] % (items[0].ndim() + 1) if items else 0
        stacked.append(_stack(ctx, items, axis))
    return state + stacked


def _scan_steps(ctx: NodeContext, body: Any, state: list, slices: list, k: int) -> tuple[list, list]:
    """Run ``body`` once per step of the zipped ``slices``, carrying ``state``; returns
    the final states and the ``k`` scan outputs' per-step lists."""
    n = len(state)
    outs: list[list] = [[] for _ in range(k)]
    for step in zip(*slices):
        ys = body.run([*state, *step], ctx.scope, ctx.training)
        state = list(ys[:n])
        for j, y in enumerate(ys[n:]):
            outs[j].append(y)
    return state, outs


def _row(x: Tensor, b: int) -> Tensor:
    """Row ``b`` of axis 0, that axis dropped."""
    return autograd.squeeze(autograd.slice(x, [b], [b + 1], [0]), [0])


def _padded(ctx: NodeContext, items: list, steps: int) -> Tensor:
    """Scan outputs stacked on a new axis 0 and padded with zeros to ``steps``."""
    y = _stack(ctx, items)
    if items and len(items) < steps:
        zeros = ctx.const(np.zeros((steps - len(items), *items[0].shape), items[0].dtype))
        y = autograd.cat([y, zeros], 0)
    return y


@runs_subgraphs
@builds(sh.Slice, sh.Squeeze, sh.Unsqueeze, sh.Cat)
def handle_scan8(ctx: NodeContext, xs: list) -> list:
    """Scan of opset 8 (a model written at opset 8; see ``singa.sonnx.opsets``):
    sequence_lens, N states then M scan inputs, all with a batch axis 0 and the scan
    inputs' sequence on axis 1. Each batch row runs the body over its first
    ``sequence_lens[b]`` steps (all without it; reversed where ``directions`` is 1); the
    scan outputs are padded with zeros to the longest sequence."""
    body = ctx.subgraphs["body"]
    m = int(ctx.attr("num_scan_inputs"))
    lens, states, seqs = xs[0], list(xs[1 : len(xs) - m]), xs[len(xs) - m :]
    dirs = [int(d) for d in ctx.attr("directions", [0] * m)]
    batch, steps = seqs[0].shape[0], seqs[0].shape[1]
    lengths = [steps] * batch if lens is None else [int(v) for v in np.asarray(ctx.static(lens)).reshape(-1)]
    n, k = len(states), len(body.output_names) - len(states)
    finals: list[list] = [[] for _ in range(n)]
    scans: list[list] = [[] for _ in range(k)]
    for b in range(batch):
        state = [_row(t, b) for t in states]
        slices = [
            _scan_slices(autograd.slice(_row(x, b), [0], [lengths[b]], [0]), 0, bool(d))
            for x, d in zip(seqs, dirs)
        ]
        state, outs = _scan_steps(ctx, body, state, slices, k)
        for i, t in enumerate(state):
            finals[i].append(t)
        for j, items in enumerate(outs):
            scans[j].append(_padded(ctx, items, steps))
    return [_stack(ctx, f) for f in finals] + [_stack(ctx, s) for s in scans]


EXPORT: dict = {}
IMPORT = {"If": handle_if, "Loop": handle_loop, "Scan": handle_scan}
#: opset 8's Scan, kept apart from opset 9's by the conversion of old models
DOMAIN = OPSET8_DOMAIN
DOMAIN_IMPORT = {"Scan": handle_scan8}
