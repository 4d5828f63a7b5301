"""Export to ONNX by tracing: run ``forward`` with a recorder on the device and turn
every recorded operation into ONNX nodes.

How it works: a :class:`~singa.sonnx.trace.Tracer` is installed as ``dev.recorder``
while the model's ``forward`` runs in eval mode under ``no_grad`` (twice for a dynamic
batch, see :mod:`singa.sonnx.trace`). Every forward operator call arrives as
``record(fn, in_arrays, out_arrays, op=..., tensors=...)``. Arrays are identified by
``id()`` (all of them are kept alive until the export ends) and named:

* the given input tensors become graph inputs (``input`` or ``input_0``, ...);
* the arrays of the model's ``get_states()`` become initializers named by their dotted
  names (``conv1.W``); without a model, leaf tensors that store their gradient become
  initializers named ``Tensor.name`` or ``param_0``, ... (and, for output tensors,
  BatchNorm's running statistics ``bn0.running_mean``, ...);
* any other array no operator produced is a constant (a ``Constant`` node);
* operator outputs are intermediate values, the requested outputs graph outputs.

Output tensors computed earlier (``to_onnx([x], [y])``) are exported by tracing a replay
of their recorded autograd graph (:mod:`singa.sonnx.recorded`).

Each operator is converted by the converter registered for ``type(op)`` in
:data:`singa.sonnx.registry.EXPORT` (merged from the family modules of
:mod:`singa.sonnx.families`). A converter reads the
operator's attributes and emits nodes through :class:`ExportContext`.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from singa.model import precision
from singa.sonnx import layer_export, passes, recorded, registry, trace
from singa.sonnx.context import ExportContext, ExportError, batch_aware, host_array, onnx_dtype
from singa.tensor import Tensor

DEFAULT_OPSET = 17
MIN_OPSET = 11


def max_opset() -> int:
    """The newest default-domain opset the installed ``onnx`` knows."""
    return onnx.defs.onnx_opset_version()


def _check_opset(opset: int | None) -> int:
    if opset is None:
        return min(DEFAULT_OPSET, max_opset())
    opset = int(opset)
    if not MIN_OPSET <= opset <= max_opset():
        raise ValueError(f"ONNX export: opset {opset} is outside [{MIN_OPSET}, {max_opset()}]")
    return opset


def _input_names(names: Sequence[str] | None, n: int, base: str) -> list[str]:
    if names is None:
        return [base] if n == 1 else [f"{base}_{i}" for i in range(n)]
    names = list(names)
    if len(names) != n:
        raise ValueError(f"ONNX export: {len(names)} {base} names for {n} {base}s")
    return names


class _Traced:
    """What the traces saw: the tracers, inputs and outputs at the batch size given and,
    for a dynamic batch, at one more (the ``*2`` fields, None otherwise)."""

    def __init__(
        self, tr1: trace.Tracer, outputs: Sequence[Tensor], inputs: Sequence[Tensor], dynamic: tuple
    ):
        self.tr1, self.outputs, self.inputs = tr1, outputs, inputs
        self.tr2, self.outputs2, self.inputs2 = dynamic
        self.dynamic = self.tr2 is not None


class _Conversion:
    """The state of one export: the context (nodes, value names and shapes) and the ONNX
    name of every array seen so far (by ``id``). Its phases run in order: inputs,
    initializers, operators, outputs, then :meth:`model` assembles the ModelProto."""

    def __init__(self, traced: _Traced, opset: int):
        self.traced = traced
        batch = traced.inputs[0].shape[0] if traced.dynamic else None
        self.ctx = ExportContext(opset, traced.dynamic, batch, batch + 1 if traced.dynamic else None)
        self.names: dict[int, str] = {}
        self.graph_inputs: list = []
        self.initializers: list[onnx.TensorProto] = []
        self.graph_outputs: list[tuple[str, Tensor]] = []

    # ----- phase 1: graph inputs ------------------------------------------------------------
    def add_inputs(self, input_names: Sequence[str] | None) -> None:
        """Name the input tensors' arrays as graph inputs."""
        tr, ctx = self.traced, self.ctx
        for i, (t, n) in enumerate(zip(tr.inputs, _input_names(input_names, len(tr.inputs), "input"))):
            n = ctx.reserve(n)
            if id(t.data) in self.names:
                raise ExportError("ONNX export: the same tensor is given twice as an input")
            self.names[id(t.data)] = n
            ctx.set_shapes(n, t.shape, tr.inputs2[i].shape if tr.dynamic else None)
            self.graph_inputs.append(helper.make_tensor_value_info(n, onnx_dtype(t.dtype), ctx.dims(n)))

    # ----- phase 2: initializers ------------------------------------------------------------
    def add_initializers(self, params: dict[int, str]) -> None:
        """Make the parameters that operators read initializers, named by ``params``."""
        arrays_by_id = {id(a): a for rec in self.traced.tr1.records for a in rec.ins}
        for key, pname in params.items():
            if key in self.names or key not in arrays_by_id:
                continue
            n = self.ctx.reserve(pname)
            self.names[key] = n
            arr = host_array(arrays_by_id[key])
            self.ctx.set_shapes(n, arr.shape, arr.shape)
            self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(arr), n))

    # ----- phase 3: operators ---------------------------------------------------------------
    def convert_operators(self) -> None:
        """Convert every recorded operator with its registered converter."""
        tr = self.traced
        recs2 = tr.tr2.records if tr.dynamic else [None] * len(tr.tr1.records)
        for rec, rec2 in zip(tr.tr1.records, recs2):
            self._convert_record(rec, rec2)
        self.ctx.layer = ""

    def _convert_record(self, rec: trace.Record, rec2: trace.Record | None) -> None:
        ctx, op = self.ctx, rec.op
        ctx.layer = rec.layer
        conv = layer_export.converter(op) or registry.EXPORT.get(type(op))
        if conv is None:
            raise ctx.error(op, "no ONNX converter is registered for this operator")
        ctx.op2 = rec2.op if rec2 is not None else None
        ctx.ins2 = rec2.ins if rec2 is not None else None
        ctx.outs2 = rec2.outs if rec2 is not None else None
        if rec2 is not None and not getattr(conv, "batch_aware", False):
            self._check_batch_independent(op, rec2.op)
        in_names = [self._input_name(op, j, a, rec2) for j, a in enumerate(rec.ins)]
        out_names = [ctx.fresh(type(op).__name__.lower()) for _ in rec.outs]
        for k, (n, a) in enumerate(zip(out_names, rec.outs)):
            ctx.set_shapes(n, a.shape, rec2.outs[k].shape if rec2 is not None else None)
        conv(ctx, op, in_names, out_names, rec.ins, rec.outs)
        for n, a in zip(out_names, rec.outs):
            self.names[id(a)] = n

    def _check_batch_independent(self, op: Any, op2: Any) -> None:
        """A converter that is not batch-aware needs attributes equal in both traces."""
        a1, a2 = trace.op_attrs(op), trace.op_attrs(op2)
        diff = sorted(k for k in a1 if not trace.same(a1[k], a2.get(k)))
        if diff:
            raise self.ctx.error(
                op, f"its attribute(s) {diff} depend on the batch size; export with dynamic_batch=False"
            )

    def _input_name(self, op: Any, j: int, a: Any, rec2: trace.Record | None) -> str:
        """The name of input ``j`` (array ``a``); an array nothing named is a constant."""
        if id(a) in self.names:
            return self.names[id(a)]
        b = rec2.ins[j] if rec2 is not None else a
        if rec2 is not None and not trace.same(a, b):
            raise self.ctx.error(
                op,
                f"input {j} is a constant that depends on the batch size (shape {tuple(a.shape)} "
                f"vs {tuple(b.shape)}); compute it from the inputs, or export with "
                "dynamic_batch=False",
            )
        n = self.ctx.const(a, hint="const")
        self.names[id(a)] = n
        self.ctx.set_shapes(n, a.shape, a.shape)
        return n

    # ----- phase 4: graph outputs -----------------------------------------------------------
    def add_outputs(self, output_names: Sequence[str] | None) -> None:
        """Name the output tensors: the node producing one is renamed to the output name
        where it can be, else an Identity node copies the value."""
        tr, ctx = self.traced, self.ctx
        keep = {i.name for i in self.initializers} | {v.name for v in self.graph_inputs}
        produced = {o for nd in ctx.nodes for o in nd.output}
        renames: dict[str, str] = {}
        for k, (t, want) in enumerate(zip(tr.outputs, _input_names(output_names, len(tr.outputs), "output"))):
            inner = self._output_source(t, want)
            ctx.claim(want)
            if inner in produced and inner not in renames and inner not in keep:
                renames[inner] = want
            else:  # an input, an initializer or a repeated output: copy it
                ctx.node("Identity", [renames.get(inner, inner)], [want])
            ctx.set_shapes(want, t.shape, tr.outputs2[k].shape if tr.dynamic else None)
            self.graph_outputs.append((want, t))
        _rename_values(ctx.nodes, renames)

    def _output_source(self, t: Tensor, want: str) -> str:
        inner = self.names.get(id(t.data))
        if inner is None:
            raise ExportError(
                "ONNX export: an output tensor was not computed from the inputs by recorded operators "
                "(was it created outside autograd?)"
            )
        if self.ctx.taken(want) and want != inner:
            raise ExportError(f"ONNX export: output name {want!r} is already used by another value")
        return inner

    # ----- phase 5: the model ---------------------------------------------------------------
    def model(self, model_name: str) -> onnx.ModelProto:
        """Simplify the nodes and assemble the checked ModelProto."""
        ctx = self.ctx
        passes.simplify(ctx.nodes, {n for n, _ in self.graph_outputs}, ctx.shapes)
        out_infos = [
            helper.make_tensor_value_info(n, onnx_dtype(t.dtype), ctx.dims(n)) for n, t in self.graph_outputs
        ]
        graph = helper.make_graph(
            ctx.nodes, model_name, self.graph_inputs, out_infos, initializer=self.initializers
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", ctx.opset)],
            producer_name="singa",
            producer_version=_version(),
        )
        model.ir_version = min(model.ir_version, _ir_version_for(ctx.opset))
        _check_output_shapes(model, ctx)
        return model


def _rename_values(nodes: list[onnx.NodeProto], renames: dict[str, str]) -> None:
    """Rename values in the nodes' inputs and outputs."""
    if not renames:
        return
    for nd in nodes:
        for names in (nd.input, nd.output):
            for i, n in enumerate(names):
                if n in renames:
                    names[i] = renames[n]


def _convert(
    traced: _Traced,
    params: dict[int, str],
    opset: int,
    names: tuple[Sequence[str] | None, Sequence[str] | None],
    model_name: str,
) -> onnx.ModelProto:
    """The ONNX model of the traced computation; ``names`` are the input and output
    value names (None for the defaults)."""
    conversion = _Conversion(traced, opset)
    conversion.add_inputs(names[0])
    conversion.add_initializers(params)
    conversion.convert_operators()
    conversion.add_outputs(names[1])
    return conversion.model(model_name)


def _version() -> str:
    import singa

    return singa.__version__


def _ir_version_for(opset: int) -> int:
    for _, ir, op, *_ in reversed(helper.VERSION_TABLE):
        if op <= opset:
            return ir
    return onnx.IR_VERSION


def _check_output_shapes(model: onnx.ModelProto, ctx: ExportContext) -> None:
    """Safety net: ONNX shape inference must not find a fixed size where the two traces
    saw a batch-dependent one (that would mean a converter baked the batch size in)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except Exception as e:
        raise ExportError(f"ONNX export: shape inference failed on the exported graph: {e}") from e
    for o in inferred.graph.output:
        tt = o.type.tensor_type
        if not tt.HasField("shape"):
            continue
        for i, (d, v) in enumerate(zip(tt.shape.dim, ctx.varying(o.name))):
            if v and d.HasField("dim_value"):
                raise ExportError(
                    f"ONNX export: axis {i} of output {o.name!r} depends on the batch size, but the exported "
                    f"graph fixes it to {d.dim_value}; export with dynamic_batch=False"
                )


# ----------------------------------------------------------------------------------------------
# Public API


def _is_operator_argument(x: Any) -> bool:
    """A Python number, or a tuple/list of them (a shape): SINGA's ``to_onnx`` accepts
    such operator arguments among the inputs (``to_onnx([x, min, max], [y])``) and
    leaves them out, as their values are already recorded in the graph."""
    if isinstance(x, tuple | list):
        return all(_is_operator_argument(v) for v in x)
    return isinstance(x, int | float) and not isinstance(x, bool)


def _as_tensors(inputs: Any) -> list[Tensor]:
    if isinstance(inputs, Tensor):
        return [inputs]
    tensors = []
    for x in inputs:
        if isinstance(x, Tensor):
            tensors.append(x)
        elif not _is_operator_argument(x):
            raise TypeError(
                f"ONNX export: inputs must be Tensors (or Python numbers and shapes, "
                f"which are left out), got {type(x).__name__}"
            )
    return tensors


def _model_params(model: Any) -> dict[int, str]:
    return {id(t.data): n for n, t in model.get_states().items()}


def _traces(fn: Callable, inputs: list[Tensor], model: Any, dynamic_batch: bool, axes: dict) -> tuple:
    """The trace at the given batch size and, for a dynamic batch, the one at batch + 1
    (inputs whose axis 0 has the batch size get one more row, and each axis of
    ``axes[i]`` of input i one more entry)."""
    tr1, outs1 = trace.trace(fn, inputs, model)
    if not dynamic_batch or inputs[0].ndim() == 0:
        return tr1, outs1, None, None, None
    b = inputs[0].shape[0]
    inputs2 = [trace.grow_batch(t, b) if t.ndim() > 0 and t.shape[0] == b else t for t in inputs]
    inputs2 = [trace.grow_axes(t, axes.get(i, ())) for i, t in enumerate(inputs2)]
    try:
        tr2, outs2 = trace.trace(fn, inputs2, model)
    except (ValueError, TypeError, IndexError) as e:
        raise ExportError(
            f"ONNX export: the computation does not run at batch size {b + 1} ({e}); a dynamic batch "
            f"needs one that does, or export with dynamic_batch=False to fix the batch at {b}"
        ) from e
    trace.align(tr1, tr2, b, b + 1)
    if len(outs1) != len(outs2):
        raise ExportError("ONNX export: forward returns a different number of outputs at another batch size")
    return tr1, outs1, tr2, outs2, inputs2


def to_onnx(
    inputs: Any,
    outputs: Any,
    model_name: str = "sonnx",
    opset: int | None = None,
    dynamic_batch: bool | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    check: bool = True,
    model: Any = None,
    dynamic_axes: dict[int, Sequence[int]] | None = None,
) -> onnx.ModelProto:
    """Export the computation from ``inputs`` to ``outputs`` as an ONNX model.

    Args:
        inputs: the input Tensor(s); their values are used for the trace. Python
            numbers and tuples of them among them (operator arguments, as SINGA's
            examples pass them) are left out: their values are in the recorded graph.
        outputs: the output Tensor(s) computed from ``inputs`` with autograd recording
            (SINGA's form, see :mod:`singa.sonnx.recorded`: the recorded graph is
            replayed in inference form, on copies of the operators), a Layer/Model
            (traced in eval mode) or a function of the input tensors. Initializers:
            the states of the Layer/Model (or of ``model``) are named by their dotted
            names; without one, leaf tensors that store gradients ``Tensor.name`` or
            ``param_<k>``, and in SINGA's form BatchNorm running statistics
            ``Tensor.name`` or ``bn<k>.running_mean``/``bn<k>.running_var``. Nodes are
            named ``<layer path>/<OpType>_<k>`` when a Layer/Model runs under the
            tracer (a Layer/Model, or a function with ``model``), else
            ``<OpType>_<k>``: in SINGA's form the recording does not say which layer
            ran an operator, so errors name the operator only.
        model_name: the ONNX graph's name.
        opset: the default-domain opset (default 17; from 11 to ``max_opset()``).
        dynamic_batch: True: axis 0 of the inputs (those whose axis 0 has the first
            input's size) is the symbolic dim ``batch``; the computation is traced at
            the given batch size and at one more, to find every size that depends on
            it, and ExportError says what cannot follow the batch. False: the batch
            size is fixed at the given one (as SINGA's exporter always does). None
            (default): dynamic when the computation allows it, else fixed, with a
            warning that gives the reason.
        input_names / output_names: value names (default ``input``/``output`` or
            ``input_<i>``/``output_<i>``).
        check: run ``onnx.checker.check_model(..., full_check=True)``.
        model: with tensors or a function as ``outputs`` (e.g. the model followed by
            a loss, to export a training graph), the Layer/Model they come from: its
            states are named by their dotted names (a function runs it in eval mode,
            its layers naming the nodes).
        dynamic_axes: with a dynamic batch, more symbolic axes: ``{i: [axes]}`` makes
            those axes of input i dynamic too (e.g. ``{0: [1]}``, a sequence length),
            traced at one more entry in the second trace (dims ``<name>_dim<axis>``).

    Raises:
        ExportError: an operator without converter (naming it, and its layer where a
            Layer/Model ran under the tracer), a
            batch-dependent size the exported graph could not express, or output
            tensors without a usable recorded graph (naming the problem).

    Example::

        autograd.training = True
        y = model.forward(x)
        onnx_model = sonnx.to_onnx([x], [y])     # or sonnx.to_onnx([x], model)
        onnx.save(onnx_model, "model.onnx")
    """
    inputs = _as_tensors(inputs)
    if not inputs:
        raise ValueError("ONNX export: at least one input tensor is needed")
    opset = _check_opset(opset)
    rest = (model_name, opset, input_names, output_names, check, model, dict(dynamic_axes or {}))
    if dynamic_batch is not None:
        return _to_onnx(inputs, outputs, bool(dynamic_batch), *rest)
    try:
        return _to_onnx(inputs, outputs, True, *rest)
    except ExportError as dynamic_error:
        result = _to_onnx(inputs, outputs, False, *rest)  # raises what a fixed batch cannot do
        batch = inputs[0].shape[0] if inputs[0].ndim() else 1
        warnings.warn(
            f"{dynamic_error} -- exported with the batch size fixed at {batch} instead "
            "(dynamic_batch=True makes this an error, dynamic_batch=False silences it)",
            stacklevel=2,
        )
        return result


def _to_onnx(
    inputs: list[Tensor],
    outputs: Any,
    dynamic_batch: bool,
    model_name: str,
    opset: int,
    input_names: Sequence[str] | None,
    output_names: Sequence[str] | None,
    check: bool,
    model: Any,
    axes: dict,
) -> onnx.ModelProto:
    """:func:`to_onnx` with the batch dynamic or fixed (and the inputs and opset checked)."""
    fn, model, recorded_graph = _computation(outputs, inputs, model, dynamic_batch)
    try:
        tr1, outs1, tr2, outs2, inputs2 = _traces(fn, inputs, model, dynamic_batch, axes)
    except (trace.TraceError, recorded.RecordError) as e:
        raise ExportError(str(e)) from None
    traced = _Traced(tr1, outs1, inputs, (tr2, outs2, inputs2))
    params = _param_names(tr1, model, recorded_graph)
    result = _convert(traced, params, opset, (input_names, output_names), model_name)
    if check:
        onnx.checker.check_model(result, full_check=True)
    return result


def _computation(outputs: Any, inputs: list[Tensor], model: Any, dynamic_batch: bool) -> tuple:
    """``(fn, model, recorded_graph)``: the function to trace for ``to_onnx``'s
    ``outputs`` (recorded tensors, a Layer/Model or a function), the model that names
    the states, and the recorded graph of output tensors (None otherwise)."""
    from singa.layer.base import Layer

    def check_model() -> None:
        if model is not None and not isinstance(model, Layer):
            raise TypeError(f"ONNX export: model must be a Layer/Model, got {type(model).__name__}")

    if recorded.are_tensors(outputs):
        check_model()
        outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
        try:
            recorded_graph = recorded.RecordedGraph(inputs, outs)
            recorded_graph.verify()
            if dynamic_batch:
                recorded_graph.check_batch(set(_model_params(model)) if model is not None else set())
        except recorded.RecordError as e:
            raise ExportError(str(e)) from None
        return recorded_graph.replay, model, recorded_graph
    if isinstance(outputs, Layer):
        layer = outputs
        if not layer.initialized:  # create the parameters outside the traces
            trace.trace(lambda *xs: _run_layer(layer, xs), inputs, layer)
        return (lambda *xs: _run_layer(layer, xs)), layer, None
    if callable(outputs):
        check_model()
        if model is not None and not model.initialized:
            trace.trace(outputs, inputs, model)
        return outputs, model, None
    raise TypeError(
        "ONNX export: `outputs` must be the output Tensor(s), the Layer/Model or the function that "
        f"computes the outputs from the inputs, got {type(outputs).__name__}"
    )


def _param_names(tr1: trace.Tracer, model: Any, recorded_graph: Any) -> dict[int, str]:
    """The initializer names by array id: leaf parameters (and, for recorded tensors,
    BatchNorm's running statistics), the model's dotted state names winning."""
    params = tr1.leaf_params() if model is None or recorded_graph is not None else {}
    if recorded_graph is not None:
        params.update({k: n for k, n in recorded_graph.state_names().items() if k not in params})
    if model is not None:
        params.update(_model_params(model))
    return params


def _run_layer(layer: Any, xs: Sequence[Tensor]) -> Any:
    """Call a layer's forward directly (bypassing graph replay), initializing it first."""
    layer.ensure_initialized(*xs)
    return layer.forward(*xs)


def export_model(
    model: Any,
    path: str | os.PathLike | None,
    inputs: Any,
    opset: int | None = None,
    dynamic_batch: bool = True,
    targets: Any = None,
    loss: Callable | None = None,
    dtype: Any = None,
    **kwargs: Any,
) -> onnx.ModelProto:
    """Export ``model`` (traced on ``inputs`` in eval mode) to an ONNX file at ``path``
    (not written when ``path`` is None) and return the ``onnx.ModelProto``.

    ``dtype=tensor.float16`` exports float16 weights, inputs and arithmetic; by default
    a model exports in float32 whatever its precision (a float16 model's states are
    exported as float32 copies; the model itself is left as it was).

    BatchNorm uses its running statistics, Dropout is an identity; parameters and buffers
    are initializers named by their dotted state names. With ``loss`` (e.g.
    ``autograd.softmax_cross_entropy``) and ``targets`` (Tensors) the training graph is
    exported: inputs ``inputs + targets``, outputs the model's output(s) and
    ``loss(output, *targets)``. ``kwargs`` go to :func:`to_onnx` (``input_names``,
    ``output_names``, ``model_name``, ``check``).

    Example::

        sonnx.export_model(model, "model.onnx", [x])
        sonnx.export_model(model, "half.onnx", [x], dtype=tensor.float16)
        sonnx.export_model(model, "train.onnx", [x], targets=[y], loss=autograd.softmax_cross_entropy)
    """
    if dtype is None and getattr(model, "precision", "float32") != "float16":
        return _export_traced(model, path, inputs, opset, dynamic_batch, targets, loss, **kwargs)
    dtype = "float32" if dtype is None else dtype
    with precision.states_as(model, dtype):
        xs = precision.inputs_as(inputs, dtype)
        return _export_traced(model, path, xs, opset, dynamic_batch, targets, loss, **kwargs)


def _export_traced(
    model: Any,
    path: str | os.PathLike | None,
    inputs: Any,
    opset: int | None,
    dynamic_batch: bool,
    targets: Any,
    loss: Callable | None,
    **kwargs: Any,
) -> onnx.ModelProto:
    """:func:`export_model` once the states and inputs have their export dtype."""
    kwargs.setdefault("model_name", type(model).__name__)
    if loss is None:
        if targets is not None:
            raise ValueError("export_model: targets are given without a loss")
        m = to_onnx(inputs, model, opset=opset, dynamic_batch=dynamic_batch, **kwargs)
    else:
        xs = _as_tensors(inputs)
        ts = _as_tensors(targets if targets is not None else [])
        n = len(xs)

        def training_graph(*args: Tensor) -> list:
            out = _run_layer(model, args[:n])
            outs = list(out) if isinstance(out, list | tuple) else [out]
            return outs + [loss(outs[0], *args[n:])]

        m = to_onnx(xs + ts, training_graph, opset=opset, dynamic_batch=dynamic_batch, model=model, **kwargs)
    if path is not None:
        onnx.save(m, os.fspath(path))
    return m


def save(model: Any, path: str | os.PathLike, inputs: Any = None, **kwargs: Any) -> onnx.ModelProto:
    """Write an ONNX model to ``path``: an ``onnx.ModelProto`` as it is, or a singa
    Model/Layer exported on ``inputs`` (see :func:`export_model`). Returns the proto."""
    if isinstance(model, onnx.ModelProto):
        onnx.save(model, os.fspath(path))
        return model
    if inputs is None:
        raise ValueError("sonnx.save: exporting a model needs its example inputs")
    return export_model(model, path, inputs, **kwargs)


__all__ = [
    "DEFAULT_OPSET",
    "ExportContext",
    "ExportError",
    "batch_aware",
    "export_model",
    "max_opset",
    "onnx_dtype",
    "save",
    "to_onnx",
]
