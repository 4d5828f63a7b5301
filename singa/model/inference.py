"""The inference path: a traced evaluation forward, rewritten with eval-only fusions,
replayed as a :class:`~singa.model.graph.Graph`.

``model.eval()`` in graph mode traces ``forward`` once per input signature (as graph
mode does for training) and replays it; :func:`build_graph` rewrites the trace first.
``sonnx.prepare(...).run`` replays the ONNX graph the same way
(:mod:`singa.sonnx.replay`). The rewrites follow the table :data:`RULES`: a producer
(a convolution, or a matrix product with a weight matrix) absorbs the single consumer
of its output when the pair is listed there:

============ =========== ======== ===================================================
producer     consumer    level    what the fused kernel does
============ =========== ======== ===================================================
matmul       bias        exact    ``x @ W`` then ``+= b`` in place (a ``linear``)
conv         batchnorm   fold     BatchNorm (eval) folded into ``W`` and ``b``
conv         batchnorm   exact    without folding (``conv+batchnorm/live``): BatchNorm's
                                  evaluation applied to each batch slice of the output
                                  as it is made (its parameters read on every call)
linear       batchnorm   fold     the same for ``x @ W + b`` (BatchNorm over (N, C))
matmul       batchnorm   fold     the same without a bias (becomes a ``linear``)
conv         add         exact    a residual of the output's shape and dtype added to
                                  each batch slice of the output as it is made
conv         relu        exact    ReLU applied in place on the convolution's output
residual     relu        exact    the same after the residual (a ResNet block's end)
linear       relu        exact    ReLU applied in place after the bias
conv         maxpool     exact    a max-pool without padding applied to each batch
activated                         slice of the output as it is made (``activated``:
                                  a convolution that absorbed its ReLU)
============ =========== ======== ===================================================

One rewrite is not a pair: with ``fold``, a convolution that
:func:`singa.kernels.conv_winograd.suits` (float32, 3 x 3 or 5 x 5, stride 1, at least
8 channels in and out) runs as a Winograd convolution F(4x4, r x r) on filters
transformed once from its weights (after any BatchNorm folded into them), counted as
``conv/winograd``: 2.25x (3 x 3) to 6.25x (5 x 5) fewer multiply-adds, with other
roundings.

Levels: ``exact`` rewrites compute every element with the same roundings as the
unfused operators, so replays stay bitwise equal to eager evaluation, and they read
the parameters live (no copy is taken). ``fold`` rewrites (``fold_batchnorm=True``)
compute ``W * a`` and ``(b - mean) * a + beta`` with ``a = scale / sqrt(var + eps)``
once, in float64, rounded to the weights' dtype, and the Winograd filters: the
results match eager evaluation to float32 rounding (a few ulps of the activations'
scale), **not bitwise**, and the folded weights are a snapshot of the parameters, so
the caller must rebuild the graph when parameters change (:class:`~singa.model.Model`
does, see :meth:`~singa.model.Model.graph`). No kernel keeps a backward cache: the trace runs
with ``autograd.training`` False.

Only a producer whose weights are external arrays (parameters or constants) and a
consumer that is the single user of the producer's output (not an output of the call)
are fused; everything else replays as traced.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import singa.kernels.conv_winograd as winograd
from singa.autograd.activation import ReLU
from singa.autograd.conv import Conv2d
from singa.autograd.elementwise import Add
from singa.autograd.linalg import AddBias, Gemm, MatMul
from singa.autograd.normalization import BatchNorm2d
from singa.autograd.pooling import MaxPool2d
from singa.kernels.conv_epilogue import pool_window
from singa.kernels.conv_slices import product_layout
from singa.model.fused import ConvForward, LinearForward
from singa.model.graph import Graph, Node, Recorder

__all__ = ["RULES", "FusionRule", "fuse", "build_graph"]

LEVELS = ("exact", "fold")
#: the count of convolutions run as Winograd convolutions (a ``fold`` rewrite)
WINOGRAD = "conv/winograd"


@dataclass
class _Stage:
    """A producer being fused: its kernel's inputs and what it absorbed."""

    kind: str  # "conv", "matmul", "linear", "residual" or "activated" (a conv after ReLU); "done"
    position: int  # where the fused node runs (the last absorbed node)
    x: int  # slot of the data input
    w: int  # slot of the weights (conv: (O, C/g, kh, kw); linear: (in, out))
    b: int | None  # slot of the bias (O,) or (1, O), or None
    out: int  # slot of the output
    conv: Any = None
    relu: bool = False
    add: Any = None  # the absorbed Add of a residual
    residual: int | None = None  # slot of the residual
    residual_first: bool = False  # the residual was the Add's first operand
    pool: Any = None  # the absorbed MaxPool2d
    bn: Any = None  # the BatchNorm2d absorbed without folding
    bn_ins: list = field(default_factory=list)  # its scale, bias, mean and variance slots
    applied: list = field(default_factory=list)


@dataclass(frozen=True)
class FusionRule:
    """One row of :data:`RULES`: a ``producer`` stage absorbs a ``consumer`` node."""

    producer: str
    consumer: str
    level: str
    absorb: Any  # (rec, stage, consumer node) -> bool (False: the pair does not fit)
    suffix: str = ""  # tells apart two rules of one pair (at different levels)

    @property
    def name(self) -> str:
        """``producer+consumer`` (plus the suffix), as counted in :attr:`Graph.fusions`."""
        return f"{self.producer}+{self.consumer}{self.suffix}"


# ----- classification of traced nodes ---------------------------------------------------------
#: operator class -> (consumer kind, whether a node of it fits the rules)
_CONSUMERS = {
    AddBias: ("bias", lambda n: n.op.axis == 0 and len(n.ins) == 2),
    BatchNorm2d: ("batchnorm", lambda n: not n.op.training and len(n.ins) == 5),
    ReLU: ("relu", lambda n: len(n.ins) == 1),
    Add: ("add", lambda n: len(n.ins) == 2 and None not in n.ins and n.ins[0] != n.ins[1]),
    MaxPool2d: ("maxpool", lambda n: len(n.ins) == 1 and pool_window(n.op) is not None),
}


def _consumer_kind(n: Node) -> str | None:
    """The consumer kind of node ``n`` in :data:`RULES`, or None."""
    if n.is_backward or n.op is None:
        return None
    kind, fits = _CONSUMERS.get(type(n.op), (None, None))
    return kind if kind is not None and fits(n) else None


def _producer(rec: Recorder, n: Node, position: int) -> _Stage | None:
    """The stage that node ``n`` starts, when it is a fusable producer: its operator
    is in :data:`_PRODUCERS` and every input but the data is external."""
    make = _PRODUCERS.get(type(n.op))
    if make is None or n.is_backward or len(n.outs) != 1 or n.outs[0] is None:
        return None
    if any(s is None for s in n.ins) or not all(rec.is_external(s) for s in n.ins[1:]):
        return None
    return make(rec, n, position)


def _conv_stage(rec: Recorder, n: Node, position: int) -> _Stage | None:
    ins = n.ins
    if len(ins) not in (2, 3):
        return None
    return _Stage("conv", position, ins[0], ins[1], ins[2] if len(ins) == 3 else None, n.outs[0], conv=n.op)


def _matmul_stage(rec: Recorder, n: Node, position: int) -> _Stage | None:
    ins = n.ins
    if len(ins) != 2 or not (_is_matrix(rec, ins[0]) and _is_matrix(rec, ins[1])):
        return None
    return _Stage("matmul", position, ins[0], ins[1], None, n.outs[0])


def _gemm_stage(rec: Recorder, n: Node, position: int) -> _Stage | None:
    op, ins = n.op, n.ins
    if not _plain_gemm(rec, op, ins):
        return None
    ws = rec.add_constant(rec.arrays[ins[1]].T) if op.transB else ins[1]  # a view: follows the parameter
    b = ins[2] if len(ins) == 3 else None
    return _Stage("matmul" if b is None else "linear", position, ins[0], ws, b, n.outs[0])


def _is_matrix(rec: Recorder, s: int) -> bool:
    return rec.ndims[s] == 2


def _plain_gemm(rec: Recorder, op: Gemm, ins: list) -> bool:
    """A Gemm that is ``x @ W (+ c)``: alpha 1, x not transposed, c a row of O."""
    if op.alpha != 1.0 or op.transA or len(ins) not in (2, 3) or not _is_matrix(rec, ins[0]):
        return False
    if not _is_matrix(rec, ins[1]):
        return False
    if len(ins) == 3:
        o = rec.arrays[ins[1]].shape[0 if op.transB else 1]
        return op.beta == 1.0 and tuple(rec.arrays[ins[2]].shape) in ((o,), (1, o))
    return True


#: operator class -> the stage it starts
_PRODUCERS = {Conv2d: _conv_stage, MatMul: _matmul_stage, Gemm: _gemm_stage}


# ----- absorbing consumers ---------------------------------------------------------------------
def _absorb_bias(rec: Recorder, st: _Stage, n: Node) -> bool:
    if not rec.is_external(n.ins[1]):
        return False
    st.b = n.ins[1]
    st.kind = "linear"
    return True


def _absorb_add(rec: Recorder, st: _Stage, n: Node) -> bool:
    st.residual_first = n.ins[1] == st.out
    st.residual = n.ins[0] if st.residual_first else n.ins[1]
    st.add = n.op
    st.kind = "residual"
    return True


def _absorb_live_batchnorm(rec: Recorder, st: _Stage, n: Node) -> bool:
    if st.bn is not None:  # one BatchNorm per convolution (a second runs as traced)
        return False
    st.bn, st.bn_ins = n.op, list(n.ins[1:])
    return True


def _absorb_relu(rec: Recorder, st: _Stage, n: Node) -> bool:
    st.relu = True
    st.kind = "activated" if st.conv is not None else "done"
    return True


def _absorb_pool(rec: Recorder, st: _Stage, n: Node) -> bool:
    st.pool = n.op
    st.kind = "done"
    return True


def _batchnorm_coefficients(rec: Recorder, n: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """(a, c) in float64 with ``bn(y) = a * y + c`` per channel, or None."""
    if not all(rec.is_external(s) for s in n.ins[1:]):
        return None
    scale, bias, mean, var = (np.asarray(_host(rec.arrays[s]), np.float64) for s in n.ins[1:])
    a = scale / np.sqrt(var + n.op.eps)
    return a, bias - mean * a


def _host(a: Any) -> Any:
    """A numpy array of ``a`` (a cupy array is copied to the host)."""
    return a.get() if hasattr(a, "get") else a


def _absorb_batchnorm(rec: Recorder, st: _Stage, n: Node) -> bool:
    coef = _batchnorm_coefficients(rec, n)
    w = rec.arrays[st.w]
    o = w.shape[0] if st.kind == "conv" else w.shape[1]
    if coef is None or coef[0].shape != (o,) or rec.ndims[n.ins[0]] != (4 if st.kind == "conv" else 2):
        return False
    a, c = coef
    xp = getattr(rec.dev, "xp", np)
    w64 = np.asarray(_host(w), np.float64)
    w_new = w64 * (a.reshape(-1, 1, 1, 1) if st.kind == "conv" else a.reshape(1, -1))
    b64 = np.zeros(o) if st.b is None else np.asarray(_host(rec.arrays[st.b]), np.float64).reshape(o)
    b_new = (b64 * a + c).astype(w.dtype)
    w_new = xp.asarray(w_new.astype(w.dtype))
    st.w = rec.add_constant(product_layout(w_new, st.conv.groups) if st.kind == "conv" else w_new)
    st.b = rec.add_constant(xp.asarray(b_new))
    if st.kind == "matmul":
        st.kind = "linear"
    return True


#: The fusion table (see the module docstring); earlier rows are tried first.
RULES: tuple[FusionRule, ...] = (
    FusionRule("matmul", "bias", "exact", _absorb_bias),
    FusionRule("conv", "batchnorm", "fold", _absorb_batchnorm),
    FusionRule("linear", "batchnorm", "fold", _absorb_batchnorm),
    FusionRule("matmul", "batchnorm", "fold", _absorb_batchnorm),
    FusionRule("conv", "batchnorm", "exact", _absorb_live_batchnorm, "/live"),
    FusionRule("conv", "add", "exact", _absorb_add),
    FusionRule("conv", "relu", "exact", _absorb_relu),
    FusionRule("residual", "relu", "exact", _absorb_relu),
    FusionRule("linear", "relu", "exact", _absorb_relu),
    FusionRule("conv", "maxpool", "exact", _absorb_pool),
    FusionRule("activated", "maxpool", "exact", _absorb_pool),
)


# ----- the rewrite -----------------------------------------------------------------------------
def _use_counts(nodes: list[Node], out_slots: list[int]) -> Counter:
    return Counter(s for n in nodes for s in n.ins if s is not None) + Counter(out_slots)


def _rule_for(kind: str, consumer: str | None, levels: tuple[str, ...]) -> FusionRule | None:
    for r in RULES:
        if r.producer == kind and r.consumer == consumer and r.level in levels:
            return r
    return None


def fuse(rec: Recorder, out_slots: list[int], fold: bool = False) -> Counter:
    """Rewrite ``rec.nodes`` (a forward traced without backward) by :data:`RULES`:
    ``exact`` rows always, ``fold`` rows when ``fold``. Returns how many times each
    rule applied (``Counter({"conv+relu": 2, ...})``)."""
    levels = LEVELS if fold else ("exact",)
    uses = _use_counts(rec.nodes, out_slots)
    stages: dict[int, _Stage] = {}  # output slot -> open stage
    kept: dict[int, Any] = {}  # position -> node, or the stage that runs there
    for p, n in enumerate(rec.nodes):
        src, st, rule = _open_stage(stages, uses, n, levels)
        if rule is not None and rule.absorb(rec, st, n):
            st.applied.append(rule.name)
            del kept[st.position], stages[src]
            st.out, st.position = n.outs[0], p
            kept[p] = st
            stages[st.out] = st
            continue
        kept[p] = n
        new = _producer(rec, n, p)
        if new is not None:
            stages[new.out] = new
    counts: Counter = Counter()
    rec.nodes = [_final_node(rec, kept[p], p, fold, counts) for p in sorted(kept)]
    return counts


def _final_node(rec: Recorder, item: Any, p: int, fold: bool, counts: Counter) -> Node:
    """The node that runs at position ``p``: a fused stage's (its rules counted into
    ``counts``), or the traced one. With ``fold``, a convolution that
    :func:`~singa.kernels.conv_winograd.suits` runs as a Winograd convolution, whether
    it absorbed anything or not."""
    if fold and isinstance(item, Node) and isinstance(item.op, Conv2d):
        item = _producer(rec, item, p) or item
    if not isinstance(item, _Stage):
        return item
    if fold and item.conv is not None and winograd.suits(item.conv, rec.arrays[item.w]):
        item.applied.append(WINOGRAD)
    if not item.applied:  # a producer that absorbed nothing: as traced
        return rec.nodes[p]
    counts.update(item.applied)
    return _stage_node(rec, item)


def _open_stage(stages: dict, uses: Counter, n: Node, levels: tuple[str, ...]) -> tuple:
    """``(slot, stage, rule)`` when node ``n`` may be absorbed by the open stage whose
    output it reads as its data (its first input, or either operand of an Add) and of
    which it is the single user; else ``(None, None, None)``."""
    consumer = _consumer_kind(n)
    for src in n.ins[: 2 if consumer == "add" else 1]:
        st = stages.get(src) if uses[src] == 1 else None
        rule = _rule_for(st.kind, consumer, levels) if st is not None else None
        if rule is not None:
            return src, st, rule
    return None, None, None


def _stage_node(rec: Recorder, st: _Stage) -> Node:
    ins = [st.x, st.w] if st.b is None else [st.x, st.w, st.b]
    if st.conv is None:
        return rec.new_node(LinearForward(st.relu), ins, [st.out])
    ins += st.bn_ins
    if st.add is not None:
        ins.append(st.residual)
    filters = winograd.transform_filters(rec.arrays[st.w]) if WINOGRAD in st.applied else None
    fn = ConvForward(st.conv, st.relu, st.add, st.residual_first, st.b is not None, st.pool, st.bn, filters)
    return rec.new_node(fn, ins, [st.out])


def build_graph(
    rec: Recorder, out_template: Any, out_arrays: list, sequential: bool = False, fold: bool = False
) -> Graph:
    """The replayable graph of an evaluation forward traced into ``rec``, fused by
    :func:`fuse`. Its attributes ``fusions`` (the rules applied, counted) and
    ``folded`` (whether it holds weights computed from the parameters, which a change
    of parameters makes stale) describe the rewrite."""
    out_slots = [rec.slot(a) for a in out_arrays]
    counts = fuse(rec, out_slots, fold)
    graph = Graph(rec, out_template, out_arrays, sequential)
    graph.fusions = counts
    graph.folded = any(name == WINOGRAD or _rule_level(name) == "fold" for name in counts)
    return graph


def _rule_level(name: str) -> str:
    return next(r.level for r in RULES if r.name == name)
