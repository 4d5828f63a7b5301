"""Graph replay for :func:`singa.sonnx.prepare`: the inference path of ONNX models.

The first ``run`` for an input signature (names, shapes and dtypes of the inputs,
``last_layers``, ``aux_output``) evaluates the graph node by node while a
:class:`~singa.model.graph.Recorder` records every kernel; the trace is rewritten
with the eval-only fusions of :mod:`singa.model.inference` (BatchNorm folded into the
convolution or Gemm before it and Winograd convolutions, by default) and later runs of
that signature replay it:
no handler, no attribute parsing, no autograd bookkeeping.

A replay is only as correct as its trace: values computed outside the recorded
operators are frozen into it. A value is *static* when it follows from initializers,
Constant nodes and the shapes of values alone (``Shape``, ``Size`` and any
deterministic node all of whose inputs are static): it is the same for every run of a
signature (the input shapes are part of it), so freezing it is right, whatever
computes it. Every other node must be of an operator type in :data:`REPLAYABLE`, whose
import handler computes its outputs from its data inputs through recorded operators,
and the inputs it reads as Python values (a ``Reshape``'s shape, a ``Slice``'s bounds:
:data:`STATIC_INPUTS`) must be static. Any other graph (random operators, subgraphs,
other domains, a shape read from data) runs node by node as before. Traces are kept
for at most :data:`MAX_GRAPHS` signatures (least recently used dropped first); a
parameter array replaced in ``rep.params`` causes a new trace, a parameter changed in
place needs :meth:`ReplayCache.clear`.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from singa import autograd
from singa.model.graph import Recorder
from singa.model.inference import build_graph
from singa.tensor import Tensor

__all__ = ["REPLAYABLE", "STATIC_INPUTS", "MAX_GRAPHS", "ReplayCache", "replayable"]

#: ONNX operator types a trace replays correctly (checked one by one in tests/sonnx/test_replay.py)
REPLAYABLE = frozenset(
    {
        "Abs",
        "Add",
        "AveragePool",
        "BatchNormalization",
        "Cast",
        "Clip",
        "Concat",
        "Constant",
        "Conv",
        "Div",
        "Dropout",
        "Einsum",
        "Erf",
        "Exp",
        "Expand",
        "Flatten",
        "Gather",
        "Gelu",
        "Gemm",
        "GlobalAveragePool",
        "HardSigmoid",
        "HardSwish",
        "Identity",
        "LayerNormalization",
        "LeakyRelu",
        "Log",
        "LogSoftmax",
        "MatMul",
        "Max",
        "MaxPool",
        "Min",
        "Mul",
        "Neg",
        "Pad",
        "Pow",
        "ReduceMax",
        "ReduceMean",
        "ReduceSum",
        "Relu",
        "Reshape",
        "Resize",
        "Sigmoid",
        "Slice",
        "Softmax",
        "Softplus",
        "Split",
        "Sqrt",
        "Squeeze",
        "Sub",
        "Tanh",
        "Tile",
        "Transpose",
        "Unsqueeze",
        "Where",
    }
)

#: inputs read as Python values (or as indices) by their handlers: replayable only when static
STATIC_INPUTS = {
    "Clip": (1, 2),
    "Expand": (1,),
    "ReduceSum": (1,),
    "Split": (1,),
    "Tile": (1,),
    "Gather": (1,),
    "Pad": (1, 2, 3),
    "ReduceMean": (1,),
    "Reshape": (1,),
    "Resize": (1, 2, 3),
    "Slice": (1, 2, 3, 4),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
}

#: operators whose outputs differ between runs on the same inputs: never static
RANDOM = frozenset(
    {"Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike"}
)

#: operators computing extra outputs outside the recorded operators: replayable with one output
_ONE_OUTPUT = frozenset({"BatchNormalization", "LayerNormalization"})

#: traces kept per prepared model
MAX_GRAPHS = 8


def replayable(model: Any, initializers: Iterable[str]) -> bool:
    """Whether every node of ``model`` (an ``onnx.ModelProto``) computes a static value
    or is of a type in :data:`REPLAYABLE` reading its :data:`STATIC_INPUTS` from static
    values (see the module's notes); ``initializers`` names the initializers whose
    values stay as they are (all of them for inference)."""
    nodes = model.graph.node
    static = set(initializers)
    for nd in nodes:
        if nd.domain not in ("", "ai.onnx") or nd.op_type in RANDOM or _has_subgraph(nd):
            return False
        outs = [o for o in nd.output if o]
        if nd.op_type in ("Shape", "Size") or all(i in static for i in nd.input if i):
            static.update(outs)
        elif not _replays(nd, outs, static):
            return False
    return True


def _replays(nd: Any, outs: list, static: set) -> bool:
    if nd.op_type not in REPLAYABLE or (nd.op_type in _ONE_OUTPUT and len(outs) > 1):
        return False
    reads = [nd.input[i] for i in STATIC_INPUTS.get(nd.op_type, ()) if i < len(nd.input)]
    return all(not name or name in static for name in reads)


def _has_subgraph(nd: Any) -> bool:
    return any(a.HasField("g") or len(a.graphs) for a in nd.attribute)


class ReplayCache:
    """The traced graphs of one prepared model, by input signature.

    Args:
        graph: the :class:`~singa.sonnx.backend.OnnxGraph` to run.
        params: its initializers as Tensors (``SingaRep.params``).
        fold_batchnorm: fold BatchNorm into the preceding convolution / Gemm weights
            and run 3x3 / 5x5 convolutions as Winograd convolutions (results close to
            node-by-node evaluation, not bitwise; False keeps bits).

    Attributes:
        enabled: whether the graph can be replayed at all (see :func:`replayable`).
        traces: how many traces were made (a count for tests and the curious).
    """

    def __init__(self, graph: Any, params: Mapping[str, Tensor], fold_batchnorm: bool = True):
        self.graph = graph
        self.params = params
        self.fold_batchnorm = bool(fold_batchnorm)
        self.enabled = replayable(graph.model, graph.initializers)
        self.traces = 0
        self._graphs: OrderedDict = OrderedDict()

    def clear(self) -> None:
        """Forget every trace (call after changing a parameter's values in place)."""
        self._graphs.clear()

    def run(self, feeds: Mapping[str, Tensor], extra: Sequence[str], stop: int | None) -> list:
        """The outputs of the graph (then the values named in ``extra``) for ``feeds``,
        replayed when a trace of this signature exists, else evaluated (and traced
        when the graph is replayable)."""
        names = sorted(feeds)
        tensors = [feeds[n] for n in names]
        dev = self.graph.device
        if not all(isinstance(t, Tensor) for t in tensors):  # sequence and optional inputs
            return self._evaluate(feeds, extra, stop)
        if not self.enabled or dev.recorder is not None or any(t.device is not dev for t in tensors):
            return self._evaluate(feeds, extra, stop)
        key = (tuple((n, t.shape, t.dtype.str) for n, t in zip(names, tensors)), stop, tuple(extra))
        entry = self._graphs.get(key)
        if entry is not None:
            replay, checks = entry
            if all(t.data is a for t, a in checks):
                self._graphs.move_to_end(key)
                return [Tensor.wrap(a, dev) for a in replay(_distinct([t.data for t in tensors]))]
            del self._graphs[key]
        return self._trace(key, feeds, tensors, extra, stop)

    def fusions(self) -> Counter:
        """The fusion rules applied in all kept traces, counted."""
        total: Counter = Counter()
        for replay, _ in self._graphs.values():
            total.update(replay.fusions)
        return total

    def _evaluate(self, feeds: Mapping[str, Tensor], extra: Sequence[str], stop: int | None) -> list:
        with autograd.no_grad():
            return self.graph.run(feeds, self.params, training=False, extra=tuple(extra), stop=stop)

    def _trace(
        self, key: tuple, feeds: Mapping, tensors: list, extra: Sequence[str], stop: int | None
    ) -> list:
        dev = self.graph.device
        rec = Recorder(dev, _distinct([t.data for t in tensors]), inplace=True)
        dev.recorder = rec
        try:
            outs = self._evaluate(feeds, extra, stop)
        finally:
            dev.recorder = None
        if not all(isinstance(o, Tensor) for o in outs):
            return outs
        replay = build_graph(rec, None, [o.data for o in outs], sequential=False, fold=self.fold_batchnorm)
        self.traces += 1
        self._graphs[key] = (replay, [(t, t.data) for t in self.params.values()])
        while len(self._graphs) > MAX_GRAPHS:
            self._graphs.popitem(last=False)
        del rec, outs
        # the first run answers from the replay too, so every run gives the same bits
        return [Tensor.wrap(a, dev) for a in replay(_distinct([t.data for t in tensors]))]


def _distinct(arrays: list) -> list:
    """The arrays, each once, in order (a graph's input buffers)."""
    out, ids = [], set()
    for a in arrays:
        if id(a) not in ids:
            ids.add(id(a))
            out.append(a)
    return out
