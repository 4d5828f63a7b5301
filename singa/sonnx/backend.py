"""Running ONNX models with autograd operators: :func:`prepare`, :class:`SingaRep`,
:class:`SingaBackend` (the ONNX backend API) and the graph executor they share with
:class:`~singa.sonnx.model.SONNXModel`.

Every ONNX node is evaluated by the handler registered for its op type in
:data:`singa.sonnx.registry.IMPORT` (merged from the family modules of
:mod:`singa.sonnx.families`). Handlers call ``singa.autograd`` functions, so an
imported graph is differentiable: the same executor runs inference (``prepare``)
and training (``SONNXModel``).

Example::

    rep = sonnx.prepare("model.onnx", device.get_default_device())
    (y,) = rep.run([x])          # numpy in -> numpy out, Tensors in -> Tensors out
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from singa import autograd
from singa import device as _device
from singa.kernels import conv_slices, workers
from singa.sonnx import checks, narrow, opsets, registry, subgraph, values
from singa.sonnx.context import NUMPY_TYPES, NodeContext, UnsupportedOperator
from singa.sonnx.replay import ReplayCache
from singa.tensor import Tensor

#: the oldest opset imported as it is (older models are converted first)
MIN_IMPORT_OPSET = opsets.MIN_IMPORT_OPSET
upgrade_opset = opsets.upgrade_opset
opset_of = opsets.opset_of

Handler = Callable[[NodeContext, list], Any]


#: the names of ONNX's default domain
DEFAULT_DOMAINS = ("", "ai.onnx")


def handlers(domain: str = "") -> dict[str, Handler]:
    """The import table ``{op_type: handler}`` of the supported ONNX operators of
    ``domain`` (the default domain, else ``ai.onnx.ml``, ``ai.onnx.preview``,
    ``ai.onnx.preview.training``; empty for other domains)."""
    if domain in DEFAULT_DOMAINS:
        return dict(registry.IMPORT)
    return dict(registry.DOMAIN_IMPORT.get(domain, {}))


def supported_ops(domain: str = "") -> list[str]:
    """The ONNX operator types of ``domain`` (the default domain unless given) the
    importer supports."""
    return sorted(handlers(domain))


def supported_domains() -> list[str]:
    """The operator domains besides the default one that the importer reads."""
    return sorted(registry.DOMAIN_IMPORT)


def _load(model: Any) -> onnx.ModelProto:
    """The ModelProto of a ModelProto, a path or bytes (see :func:`checks.load`)."""
    return checks.load(model)[0]


def _get_device(dev: Any) -> Any:
    if dev is None:
        return _device.get_default_device()
    if isinstance(dev, str):
        kind = dev.upper().split(":")[0]
        if kind == "CPU":
            return _device.get_default_device()
        if kind in ("CUDA", "GPU"):
            idx = int(dev.split(":")[1]) if ":" in dev else 0
            return _device.create_cuda_gpu_on(idx)
        raise ValueError(f"ONNX import: unknown device {dev!r}")
    return dev


class OnnxGraph:
    """An ONNX graph ready to run with autograd operators.

    Args:
        model: the ONNX model.
        device: where tensors live.
        source: what to call the model in errors (e.g. its file's path).

    Attributes:
        initializers: ``{onnx name: numpy array}``.
        input_names: graph inputs that are not initializers, in order.
        output_names: graph outputs, in order.
    """

    def __init__(self, model: onnx.ModelProto, device: Any, source: str = "the ONNX model"):
        model = upgrade_opset(model)
        self.model = model
        self.device = device
        self.opset = opset_of(model)
        g = model.graph
        tables = {d: handlers(d) for d in {nd.domain for nd in g.node}}
        problems = []
        for i, nd in enumerate(g.node):
            if nd.op_type not in tables[nd.domain]:
                kind = nd.op_type if nd.domain in DEFAULT_DOMAINS else f"{nd.domain}.{nd.op_type}"
                problems.append(f"{kind} (node {nd.name or (nd.output[0] if nd.output else i)!r})")
        if not problems:  # the bodies of control-flow nodes, built now so that prepare checks them
            self.subgraphs = [self._subgraphs(nd, source) for nd in g.node]
        if problems:
            first = f"ONNX import (opset {self.opset}): unsupported operator(s), first to last: "
            raise UnsupportedOperator(first + ", ".join(problems))
        for v in list(g.input) + list(g.output):
            values.value_kind(v.type, f"value {v.name!r}")
        #: the declared type of each graph input (tensor, sequence or optional), by name
        self.input_types = {v.name: v.type for v in g.input}
        self.handlers = [tables[nd.domain][nd.op_type] for nd in g.node]
        #: indices of the nodes SINGA counts as layers for ``last_layers`` (all but Constant)
        self.layers = [i for i, nd in enumerate(g.node) if nd.op_type != "Constant"]
        self.initializers = checks.initializer_arrays(g, source)
        checks.check_graph(g, self.initializers, source)
        self.state_constants = self._state_constants()
        self.input_names = [v.name for v in g.input if v.name not in self.initializers]
        self.output_names = [v.name for v in g.output]
        self._contexts: dict[bool, list] = {}

    def _subgraphs(self, nd: onnx.NodeProto, source: str) -> dict:
        """``{attribute: SubGraph}`` of a node's graph attributes (If, Loop, Scan)."""
        where = f"{source}, {nd.op_type} node {nd.name or nd.output[0]!r}"
        return {
            name: subgraph.SubGraph(g, self.opset, self.device, OnnxGraph, where)
            for name, g in subgraph.graph_attributes(nd).items()
        }

    def _state_constants(self) -> dict[str, np.ndarray]:
        """``{output name: value}`` of the Constant nodes that feed the running statistics
        of a BatchNormalization (inputs 3 and 4): states of the model like initializers
        in the same place (a SONNXModel makes them buffers, updated in training and
        checkpointed); the values are writable copies."""
        stats = {
            name
            for nd in self.model.graph.node
            if nd.op_type == "BatchNormalization"
            for name in nd.input[3:5]
            if name and name not in self.initializers
        }
        out: dict[str, np.ndarray] = {}
        for i, nd in enumerate(self.model.graph.node):
            if nd.op_type == "Constant" and nd.output and nd.output[0] in stats:
                ys = self.handlers[i](NodeContext(nd, self.opset, self.device, False), [])
                out[nd.output[0]] = np.array(ys.to_numpy())
        return out

    def contexts(self, training: bool) -> list[NodeContext]:
        """Node contexts (parsed attributes), built once per mode."""
        if training not in self._contexts:
            ctxs = [NodeContext(nd, self.opset, self.device, training) for nd in self.model.graph.node]
            for ctx, subs in zip(ctxs, self.subgraphs):
                ctx.subgraphs = subs
            self._contexts[training] = ctxs
        return self._contexts[training]

    def cut(self, last_layers: int | None) -> int | None:
        """The index of the last node to run for SINGA's ``last_layers`` (None: all).

        SINGA's rule (its ``SingaRep.run``): layers are the nodes other than Constant,
        and ``last_layers`` is the index of the last layer run, ``layers[:k + 1]``; a
        negative ``k`` gives ``(k + 1) mod n``, so ``-2`` runs every layer, ``-3`` all
        but the last (SINGA's transfer-learning example cuts a classifier off with
        ``-3``) and ``-1`` only the first layer (SINGA's test_onnx.py checks that)."""
        if last_layers is None:
            return None
        n = len(self.layers)
        if isinstance(last_layers, bool) or not isinstance(last_layers, int | np.integer):
            raise TypeError(f"ONNX run: last_layers must be an int, got {type(last_layers).__name__}")
        k = int(last_layers)
        last = k if k >= 0 else (k + 1) % n if k >= -n - 1 else -1
        if not 0 <= last < n:
            raise ValueError(
                f"ONNX run: last_layers={last_layers} is out of range: the graph has {n} layers "
                f"(nodes other than Constant), give 0..{n - 1} or -1..-{n + 1}"
            )
        return None if last == n - 1 else self.layers[last]

    def run(
        self,
        feeds: Mapping[str, Tensor],
        params: Mapping[str, Tensor],
        training: bool = False,
        extra: Sequence[str] = (),
        stop: int | None = None,
    ) -> list:
        """Evaluate the graph; ``params`` maps initializer names (and names of
        :attr:`state_constants`) to tensors: the model's states, which training nodes
        update in place (each initializer missing from it becomes a constant, each
        Constant node missing from it runs). Returns the graph outputs,
        then the values named in ``extra``. With ``stop`` (a node index, see
        :meth:`cut`) only the nodes up to it run, and its outputs replace the graph
        outputs."""
        env = self._environment(feeds, params)
        states = frozenset(id(t.data) for t in params.values())
        nodes = zip(self.contexts(training), self.handlers)
        if stop is not None:
            nodes = list(nodes)[: stop + 1]
        for ctx, fn in nodes:
            if not self._is_state_constant(ctx, params):
                ctx.states = states
                self._run_node(ctx, fn, env)
        unknown = [n for n in extra if n not in env]
        if unknown:
            where = "in the graph" if stop is None else "computed by the layers run (last_layers)"
            raise ValueError(f"ONNX run: no value named {unknown} {where}")
        outs = self.output_names if stop is None else [n for n in self.model.graph.node[stop].output if n]
        return [env[n] for n in list(outs) + list(extra)]

    def _environment(self, feeds: Mapping[str, Tensor], params: Mapping[str, Tensor]) -> dict[str, Any]:
        """The values known before any node runs: inputs, initializers, states."""
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise ValueError(f"ONNX run: no value given for graph input(s) {missing}")
        env: dict[str, Any] = {"": None}
        for name, arr in self.initializers.items():
            env[name] = params[name] if name in params else self._const(arr)
        for name in self.state_constants:
            if name in params:
                env[name] = params[name]
        env.update(feeds)
        return env

    def _is_state_constant(self, ctx: NodeContext, params: Mapping[str, Tensor]) -> bool:
        """A Constant node whose value is a state of the model (see state_constants)."""
        out = ctx.node.output[0] if ctx.node.output else ""
        return ctx.op_type == "Constant" and out in self.state_constants and out in params

    @staticmethod
    def _run_node(ctx: NodeContext, fn: Handler, env: dict[str, Any]) -> None:
        """Evaluate one node, reading its inputs from ``env`` and writing its outputs."""
        ctx.scope = env
        xs = []
        for n in ctx.node.input:
            if n not in env:
                raise ValueError(f"ONNX import: node {ctx.name!r} reads {n!r}, which nothing produced")
            xs.append(env[n])
        if not values.takes_any(fn):
            values.check_tensors(ctx.op_type, ctx.name, ctx.node.input, xs)
        try:
            ys = narrow.in_float32(ctx, fn, xs) if narrow.bfloat16_arithmetic(ctx, xs) else fn(ctx, xs)
        except (TypeError, ValueError) as e:
            kinds = sorted(
                {x.dtype.name for x in xs if isinstance(x, Tensor) and x.dtype.name not in NUMPY_TYPES}
                - {"object"}  # strings: the string operators' own errors stand
            )
            if kinds:  # bfloat16, float8 ... (ml_dtypes) reach arithmetic only through Cast
                raise ctx.unsupported(f"element type {', '.join(kinds)} is not supported ({e})") from e
            raise
        if ys is None or isinstance(ys, Tensor | values.TensorSequence):  # one output
            ys = (ys,)
        for n, y in zip(ctx.node.output, ys):
            if n:
                env[n] = y

    def _const(self, arr: np.ndarray) -> Tensor:
        xp = self.device.xp
        return Tensor.wrap(arr if xp is np else xp.asarray(arr), self.device)


def _feeds(graph: OnnxGraph, inputs: Any, device: Any) -> tuple[dict, bool]:
    """Map run() inputs (a list in graph-input order, or a dict by name) to tensors;
    also says whether the caller gave Tensors."""
    if isinstance(inputs, Mapping):
        items = list(inputs.items())
    else:
        if isinstance(inputs, Tensor | np.ndarray):
            inputs = [inputs]
        inputs = list(inputs)
        if len(inputs) > len(graph.input_names):
            # models listing initializers among their inputs (IR < 4) may be fed them too
            names = [v.name for v in graph.model.graph.input]
        else:
            names = graph.input_names
        if len(inputs) > len(names):
            raise ValueError(f"ONNX run: {len(inputs)} inputs given, the graph has {len(names)}")
        items = list(zip(names, inputs))
    feeds = {}
    as_tensors = False
    for name, v in items:
        first = v[0] if isinstance(v, list | tuple) and v else v
        as_tensors = as_tensors or isinstance(first, Tensor)
        feeds[name] = values.feed(v, graph.input_types.get(name), device, name)
    return feeds, as_tensors


def _lay_out_conv_weights(contexts: Sequence[NodeContext], params: dict[str, Tensor]) -> None:
    """Conv weights given as initializers, kept in the layout the convolution's products
    read (:func:`singa.kernels.conv_slices.product_layout`; same values), so that a run does not
    copy every filter bank again. In-place changes to ``params`` still reach node-by-node
    runs and exact replays (folded ones take a snapshot: ``ReplayCache.clear``)."""
    for ctx in contexts:
        if ctx.op_type != "Conv" or len(ctx.node.input) < 2 or ctx.node.input[1] not in params:
            continue
        w = params[ctx.node.input[1]]
        laid = conv_slices.product_layout(w.data, int(ctx.attr("group", 1)))
        if laid is not w.data:
            params[ctx.node.input[1]] = Tensor.wrap(laid, w.device)


class SingaRep(BackendRep):
    """A prepared ONNX model (ONNX backend API): ``run(inputs)`` returns the outputs.

    Inputs are given in the order of the graph's inputs (initializers excluded) or as a
    dict by name. Given Tensors it returns Tensors (as SINGA does), given numpy arrays
    numpy arrays.

    With ``use_graph`` (the default) runs replay a trace per input signature with the
    eval-only fusions (:mod:`singa.sonnx.replay`); ``fold_batchnorm`` (default True)
    folds BatchNorm into the convolution or Gemm before it and runs 3x3 and 5x5
    convolutions as Winograd convolutions (:mod:`singa.kernels.conv_winograd`), which
    matches node-by-node evaluation to float32 rounding but not bitwise (False keeps
    the bits).
    """

    def __init__(
        self,
        model: onnx.ModelProto,
        device: Any,
        source: str = "the ONNX model",
        use_graph: bool = True,
        fold_batchnorm: bool = True,
    ):
        super().__init__()
        self.model = model
        self.device = device
        self.graph = OnnxGraph(model, device, source)
        self.params = {n: self.graph._const(a) for n, a in self.graph.initializers.items()}
        _lay_out_conv_weights(self.graph.contexts(False), self.params)
        self.use_graph = bool(use_graph)
        self.replays = ReplayCache(self.graph, self.params, fold_batchnorm)

    def run(
        self, inputs: Any, last_layers: int | None = None, aux_output: Sequence[str] = (), **kwargs: Any
    ) -> list:
        """Run inference; returns the outputs as a list (Tensors or numpy arrays).

        As SINGA's ``SingaRep.run``: ``last_layers`` runs the model up to a layer
        (the index of the last layer run, layers being the nodes other than Constant;
        ``-3`` drops the last one, see :meth:`OnnxGraph.cut`) and returns the outputs of
        the last layer run in place of the graph outputs; ``aux_output`` names
        intermediate values to append."""
        feeds, as_tensors = _feeds(self.graph, inputs, self.device)
        stop = self.graph.cut(last_layers)
        with workers.blas_for_workers():
            if self.use_graph:
                outs = self.replays.run(feeds, tuple(aux_output), stop)
            else:
                with autograd.no_grad():
                    outs = self.graph.run(
                        feeds, self.params, training=False, extra=tuple(aux_output), stop=stop
                    )
        return [values.to_user(o, as_tensors) for o in outs]


def prepare(
    model: Any, device: Any = None, use_graph: bool = True, fold_batchnorm: bool = True, **kwargs: Any
) -> SingaRep:
    """Prepare an ONNX model (ModelProto, path or bytes) to run on ``device`` (a singa
    Device, "CPU", "CUDA" / "CUDA:1", or None for the default CPU device).

    ``use_graph`` and ``fold_batchnorm``: see :class:`SingaRep` (runs replay a fused
    trace; BatchNorm folded and Winograd convolutions, float32-close to node-by-node
    evaluation, not bitwise).

    Raises UnsupportedOperator naming every unsupported op type and its node, and
    :class:`~singa.sonnx.checks.InvalidModel` (a ValueError) naming the file and the
    initializer or node for a truncated or corrupt file, an initializer whose data
    does not match its dims, a graph without nodes, a value nothing defines or a cycle.
    """
    proto, source = checks.load(model)
    return SingaRep(proto, _get_device(device), source, use_graph, fold_batchnorm)


def _type_of(value: Any) -> onnx.TypeProto | None:
    """The value type of a ``run_node`` input: a sequence for a list of arrays or a
    ``SequenceProto``, else a tensor (None)."""
    if isinstance(value, onnx.SequenceProto) or (
        isinstance(value, list | tuple) and value and all(isinstance(v, np.ndarray | Tensor) for v in value)
    ):
        return onnx.helper.make_sequence_type_proto(onnx.helper.make_tensor_type_proto(0, None))
    return None


class SingaBackend(Backend):
    """The ONNX backend API over :func:`prepare`."""

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> SingaRep:
        """See :func:`prepare`."""
        return prepare(model, device, **kwargs)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> list:
        """Prepare and run in one call."""
        return prepare(model, device).run(inputs)

    @classmethod
    def run_node(
        cls,
        node: onnx.NodeProto,
        inputs: Sequence[Any],
        device: str = "CPU",
        outputs_info: Any = None,
        **kw: Any,
    ) -> list:
        """Run a single node on numpy inputs."""
        dev = _get_device(device)
        opset = int(kw.get("opset_version", onnx.defs.onnx_opset_version()))
        table = handlers(node.domain)
        if node.op_type not in table:
            raise UnsupportedOperator(
                f"ONNX import: unsupported operator {node.domain or 'ai.onnx'}.{node.op_type}"
            )
        ctx = NodeContext(node, opset, dev, False)
        xs = [None if a is None else values.feed(a, _type_of(a), dev) for a in inputs]
        with autograd.no_grad():
            ys = table[node.op_type](ctx, xs)
        ys = (ys,) if ys is None or isinstance(ys, Tensor | values.TensorSequence) else ys
        return [values.to_user(y, False) for y in ys]

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """CPU always; CUDA when cupy sees a GPU."""
        kind = device.upper().split(":")[0]
        return kind == "CPU" or (kind in ("CUDA", "GPU") and _device.get_num_gpus() > 0)


run_model = SingaBackend.run_model
run_node = SingaBackend.run_node
supports_device = SingaBackend.supports_device
