"""Export to ONNX by tracing: run ``forward`` once with a recorder on the device and
turn every recorded operation into ONNX nodes.

How it works: :class:`_Tracer` is installed as ``dev.recorder`` while the model's
``forward`` runs in eval mode under ``no_grad``. Every forward operator call arrives as
``record(fn, in_arrays, out_arrays, op=..., tensors=...)``. Arrays are identified by
``id()`` (all of them are kept alive until the export ends) and named:

* the given input tensors become graph inputs (``input`` or ``input_0``, ...);
* the arrays of the model's ``get_states()`` become initializers named by their dotted
  names (``conv1.W``); without a model, leaf tensors that store their gradient become
  initializers named ``param_0``, ...;
* any other array no operator produced is a constant (a ``Constant`` node);
* operator outputs are intermediate values, the requested outputs graph outputs.

Each operator is converted by the converter registered for ``type(op)`` in the tables
of the ``export_*`` modules (one per autograd family). A converter reads the
operator's attributes and emits nodes through :class:`ExportContext`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from singa import autograd
from singa.tensor import Tensor

DEFAULT_OPSET = 17
MIN_OPSET = 11
BATCH_DIM = "batch"


class ExportError(RuntimeError):
    """An operator (or a model) that cannot be exported to ONNX."""


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


def _host(a: Any) -> np.ndarray:
    """A numpy copy of a numpy or cupy array."""
    if isinstance(a, np.ndarray | np.generic):
        return np.asarray(a)
    return a.get()


def onnx_dtype(dtype: Any) -> int:
    """The ONNX element type of a numpy dtype."""
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


# ----------------------------------------------------------------------------------------------
# Recording


class _Record:
    __slots__ = ("op", "ins", "outs", "layer")

    def __init__(self, op: Any, ins: list, outs: tuple, layer: str):
        self.op = op
        self.ins = ins
        self.outs = outs
        self.layer = layer


class _Tracer:
    """The recorder installed on the device while ``forward`` runs."""

    def __init__(self) -> None:
        self.records: list[_Record] = []
        self.layer_stack: list[str] = []
        self.keep: list[Any] = []  # keeps every seen array alive, so ids stay unique

    def record(self, fn, in_arrays, out_arrays, op=None, tensors=None, is_backward=False):
        """The recorder protocol of ``singa.autograd.engine``; only forward operator
        calls matter for export."""
        if op is None or is_backward:
            return
        ins = list(in_arrays)
        outs = tuple(out_arrays)
        self.keep.append((ins, outs, tensors))
        layer = self.layer_stack[-1] if self.layer_stack else ""
        self.records.append(_Record(op, ins, outs, layer))


def _wrap_forward(tracer: _Tracer, name: str, layer: Any) -> Callable:
    original = layer.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        tracer.layer_stack.append(name)
        try:
            return original(*args, **kwargs)
        finally:
            tracer.layer_stack.pop()

    return forward


def _layer_label(name: str, layer: Any) -> str:
    return f"{name} ({type(layer).__name__})" if name else type(layer).__name__


def _trace(fn: Callable, inputs: Sequence[Tensor], model: Any = None) -> tuple[_Tracer, list]:
    """Run ``fn(*inputs)`` under a tracer; returns the tracer and the output tensors."""
    devs = {id(t.device): t.device for t in inputs}
    tracer = _Tracer()
    patched = []
    modes = []
    if model is not None:
        layers = [("", model)] + list(model.sublayers().items())
        for name, layer in layers:
            modes.append((layer, layer.training))
            layer.training = False
            label = _layer_label(name, layer)
            layer.forward = _wrap_forward(tracer, label, layer)
            patched.append(layer)
    saved = {k: d.recorder for k, d in devs.items()}
    for d in devs.values():
        if d.recorder is not None:
            raise ExportError(f"ONNX export: device {d} is already being traced (graph mode is recording)")
        d.recorder = tracer
    try:
        with autograd.no_grad():
            out = fn(*inputs)
    finally:
        for k, d in devs.items():
            d.recorder = saved[k]
        for layer in patched:
            del layer.forward
        for layer, mode in modes:
            layer.training = mode
    if isinstance(out, Tensor):
        out = [out]
    elif isinstance(out, list | tuple):
        out = list(out)
    else:
        raise ExportError(f"ONNX export: forward returned {type(out).__name__}, expected Tensor(s)")
    for o in out:
        if not isinstance(o, Tensor):
            raise ExportError(f"ONNX export: forward returned {type(o).__name__}, expected Tensor(s)")
    return tracer, out


# ----------------------------------------------------------------------------------------------
# Building the graph


class ExportContext:
    """What a converter sees: the opset, value names and ways to add nodes.

    Attributes:
        opset: the default-domain opset being written.
        dynamic_batch: the batch axis (axis 0 of the inputs) is symbolic.
        batch: the traced batch size (None without dynamic batch).
        layer: the label of the layer the current operator came from.
    """

    def __init__(self, opset: int, dynamic_batch: bool, batch: int | None):
        self.opset = opset
        self.dynamic_batch = dynamic_batch
        self.batch = batch
        self.nodes: list[onnx.NodeProto] = []
        self.layer = ""
        self._names: set[str] = set()
        self._counter: dict[str, int] = {}
        self._batch_major: set[str] = set()
        self._shapes: dict[str, tuple] = {}

    # names --------------------------------------------------------------------------------
    def reserve(self, name: str) -> str:
        """Claim ``name`` (or ``name_1``, ... if taken) as a value name."""
        base, k = name, 0
        while name in self._names:
            k += 1
            name = f"{base}_{k}"
        self._names.add(name)
        return name

    def fresh(self, hint: str = "t") -> str:
        """A new unique value name."""
        k = self._counter.get(hint, 0)
        while f"{hint}_{k}" in self._names:
            k += 1
        self._counter[hint] = k + 1
        return self.reserve(f"{hint}_{k}")

    # batch-axis bookkeeping ---------------------------------------------------------------------
    def is_batch_major(self, name: str) -> bool:
        """True when axis 0 of value ``name`` is the (dynamic) batch axis."""
        return self.dynamic_batch and name in self._batch_major

    def mark_batch_major(self, name: str) -> None:
        """Declare axis 0 of value ``name`` to be the batch axis."""
        self._batch_major.add(name)

    def shape(self, name: str) -> tuple:
        """The traced shape of value ``name``."""
        return self._shapes[name]

    # nodes ----------------------------------------------------------------------------------
    def node(
        self,
        op_type: str,
        inputs: Sequence[str],
        outputs: Sequence[str] | int = 1,
        domain: str = "",
        **attrs: Any,
    ) -> list[str]:
        """Add a node; ``outputs`` are names, or a count of fresh names to create.
        Attributes with value None are left out. Returns the output names."""
        if isinstance(outputs, int):
            outputs = [self.fresh(op_type.lower()) for _ in range(outputs)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        label = self.layer.split(" ")[0] if self.layer else ""
        name = f"{label}/{op_type}_{len(self.nodes)}" if label else f"{op_type}_{len(self.nodes)}"
        self.nodes.append(
            helper.make_node(op_type, list(inputs), list(outputs), name=name, domain=domain, **attrs)
        )
        return list(outputs)

    def const(self, value: Any, dtype: Any = None, hint: str = "const") -> str:
        """A ``Constant`` node holding ``value``; returns its output name."""
        arr = np.asarray(_host(value) if not isinstance(value, list | tuple | int | float) else value)
        if dtype is not None:
            arr = arr.astype(dtype)
        name = self.fresh(hint)
        tensor = numpy_helper.from_array(np.ascontiguousarray(arr), name)
        self.nodes.append(helper.make_node("Constant", [], [name], name=f"{name}_node", value=tensor))
        return name

    def ints(self, values: Sequence[int], hint: str = "ints") -> str:
        """A 1-D int64 constant (shapes, axes, pads)."""
        return self.const(np.asarray(list(values), dtype=np.int64).reshape(-1), hint=hint)

    def axes_arg(self, op_type: str, axes: Sequence[int] | None, since: int) -> tuple[list, dict]:
        """Axes as an input (``opset >= since``) or an attribute: returns (extra inputs, attrs)."""
        if axes is None:
            return [], {}
        axes = [int(a) for a in axes]
        if self.opset >= since:
            return [self.ints(axes, "axes")], {}
        return [], {"axes": axes}

    def error(self, op: Any, why: str) -> ExportError:
        """An ExportError naming the operator and the layer it came from."""
        where = f" in layer {self.layer}" if self.layer else ""
        return ExportError(f"ONNX export: operator {type(op).__name__}{where}: {why}")


def _converter_table() -> dict:
    from singa.sonnx import converters

    return converters.CONVERTERS


def _convert(
    tracer: _Tracer,
    inputs: Sequence[Tensor],
    outputs: Sequence[Tensor],
    params: dict[int, str],
    opset: int,
    dynamic_batch: bool,
    input_names: Sequence[str] | None,
    output_names: Sequence[str] | None,
    model_name: str,
) -> onnx.ModelProto:
    batch = inputs[0].shape[0] if dynamic_batch and inputs and inputs[0].ndim() > 0 else None
    ctx = ExportContext(opset, dynamic_batch and batch is not None, batch)
    table = _converter_table()
    names: dict[int, str] = {}
    graph_inputs = []
    if input_names is None:
        input_names = ["input"] if len(inputs) == 1 else [f"input_{i}" for i in range(len(inputs))]
    if len(input_names) != len(inputs):
        raise ValueError(f"ONNX export: {len(input_names)} input names for {len(inputs)} inputs")
    for t, n in zip(inputs, input_names):
        n = ctx.reserve(n)
        if id(t.data) in names:
            raise ExportError("ONNX export: the same tensor is given twice as an input")
        names[id(t.data)] = n
        ctx._shapes[n] = t.shape
        dims: list = list(t.shape)
        if ctx.dynamic_batch and t.ndim() > 0 and t.shape[0] == batch:
            dims[0] = BATCH_DIM
            ctx.mark_batch_major(n)
        graph_inputs.append(helper.make_tensor_value_info(n, onnx_dtype(t.dtype), dims))
    initializers: list[onnx.TensorProto] = []
    arrays_by_id = {}
    for rec in tracer.records:
        for a in rec.ins:
            arrays_by_id.setdefault(id(a), a)
    for key, pname in params.items():
        if key in names or key not in arrays_by_id:
            continue
        n = ctx.reserve(pname)
        names[key] = n
        arr = _host(arrays_by_id[key])
        ctx._shapes[n] = arr.shape
        initializers.append(numpy_helper.from_array(np.ascontiguousarray(arr), n))

    for rec in tracer.records:
        ctx.layer = rec.layer
        conv = table.get(type(rec.op))
        if conv is None:
            raise ctx.error(rec.op, "no ONNX converter is registered for this operator")
        in_names = []
        for a in rec.ins:
            if id(a) not in names:
                n = ctx.const(a, hint="const")
                names[id(a)] = n
                ctx._shapes[n] = a.shape
            in_names.append(names[id(a)])
        out_names = [ctx.fresh(type(rec.op).__name__.lower()) for _ in rec.outs]
        for n, a in zip(out_names, rec.outs):
            ctx._shapes[n] = a.shape
            if (
                ctx.dynamic_batch
                and a.ndim > 0
                and a.shape[0] == batch
                and any(ctx.is_batch_major(i) for i in in_names)
            ):
                ctx.mark_batch_major(n)
        conv(ctx, rec.op, in_names, out_names, rec.ins, rec.outs)
        for n, a in zip(out_names, rec.outs):
            names[id(a)] = n

    if output_names is None:
        output_names = ["output"] if len(outputs) == 1 else [f"output_{i}" for i in range(len(outputs))]
    if len(output_names) != len(outputs):
        raise ValueError(f"ONNX export: {len(output_names)} output names for {len(outputs)} outputs")
    graph_outputs = []
    init_names = {i.name for i in initializers}
    input_set = {v.name for v in graph_inputs}
    produced = {o for nd in ctx.nodes for o in nd.output}
    renames: dict[str, str] = {}
    ctx.layer = ""
    for t, want in zip(outputs, output_names):
        inner = names.get(id(t.data))
        if inner is None:
            raise ExportError(
                "ONNX export: an output tensor was not computed from the inputs by recorded operators "
                "(was it created outside autograd?)"
            )
        if want in ctx._names and want != inner:
            raise ExportError(f"ONNX export: output name {want!r} is already used by another value")
        if inner in produced and inner not in renames and inner not in input_set and inner not in init_names:
            renames[inner] = want
            ctx._names.add(want)
        else:  # an input, an initializer or a repeated output: copy it
            src = renames.get(inner, inner)
            ctx._names.add(want)
            ctx.node("Identity", [src], [want])
        if ctx.is_batch_major(inner):
            ctx.mark_batch_major(want)
        graph_outputs.append((want, t))
    if renames:
        for nd in ctx.nodes:
            for i, n in enumerate(nd.input):
                if n in renames:
                    nd.input[i] = renames[n]
            for i, n in enumerate(nd.output):
                if n in renames:
                    nd.output[i] = renames[n]
    _drop_identities(ctx.nodes, {n for n, _ in graph_outputs})

    out_infos = [helper.make_tensor_value_info(n, onnx_dtype(t.dtype), None) for n, t in graph_outputs]
    graph = helper.make_graph(ctx.nodes, model_name, graph_inputs, out_infos, initializer=initializers)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset)],
        producer_name="singa",
        producer_version=_version(),
    )
    model.ir_version = min(model.ir_version, _ir_version_for(opset))
    _set_output_shapes(model, graph_outputs, ctx)
    return model


def _version() -> str:
    import singa

    return singa.__version__


def _ir_version_for(opset: int) -> int:
    for _, ir, op, *_ in reversed(helper.VERSION_TABLE):
        if op <= opset:
            return ir
    return onnx.IR_VERSION


def _drop_identities(nodes: list, keep: set[str]) -> None:
    """Remove Identity nodes (Dropout in eval mode, ...) whose output is not a graph output."""
    alias: dict[str, str] = {}
    kept = []
    for nd in nodes:
        for i, n in enumerate(nd.input):
            if n in alias:
                nd.input[i] = alias[n]
        if nd.op_type == "Identity" and nd.output[0] not in keep:
            alias[nd.output[0]] = nd.input[0]
            continue
        kept.append(nd)
    nodes[:] = kept


def _set_output_shapes(model: onnx.ModelProto, outputs: list, ctx: ExportContext) -> None:
    """Fill in the outputs' shapes from ONNX shape inference; with a dynamic batch, an
    output that should carry the batch axis but got a fixed size means the trace baked
    the batch size in somewhere (checked here, reported as an ExportError)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        shapes = {}
        for o in inferred.graph.output:
            tt = o.type.tensor_type
            if tt.HasField("shape"):
                shapes[o.name] = [d.dim_param if d.dim_param else d.dim_value for d in tt.shape.dim]
    except Exception as e:  # pragma: no cover - reported by the checker below
        raise ExportError(f"ONNX export: shape inference failed on the exported graph: {e}") from e
    for vi, (name, t) in zip(model.graph.output, outputs):
        dims = shapes.get(name)
        traced: list = list(t.shape)
        if ctx.is_batch_major(name):
            traced[0] = BATCH_DIM
        if dims is None or len(dims) != len(traced):
            dims = traced
        if ctx.is_batch_major(name) and dims[0] != BATCH_DIM:
            raise ExportError(
                f"ONNX export: output {name!r} has a fixed batch size {dims[0]} in the exported graph "
                "(an operator baked the traced batch size in); export with dynamic_batch=False"
            )
        vi.CopyFrom(helper.make_tensor_value_info(name, onnx_dtype(t.dtype), dims))


# ----------------------------------------------------------------------------------------------
# Public API


def _as_tensors(inputs: Any) -> list[Tensor]:
    if isinstance(inputs, Tensor):
        return [inputs]
    inputs = list(inputs)
    for x in inputs:
        if not isinstance(x, Tensor):
            raise TypeError(f"ONNX export: inputs must be Tensors, got {type(x).__name__}")
    return inputs


def _model_params(model: Any) -> dict[int, str]:
    return {id(t.data): n for n, t in model.get_states().items()}


def _leaf_params(tracer: _Tracer) -> dict[int, str]:
    out: dict[int, str] = {}
    for _, _, tensors in tracer.keep:
        for t in tensors or ():
            if isinstance(t, Tensor) and t.stores_grad and t.creator is None and id(t.data) not in out:
                out[id(t.data)] = t.name or f"param_{len(out)}"
    return out


def to_onnx(
    inputs: Any,
    outputs: Any,
    model_name: str = "sonnx",
    opset: int | None = None,
    dynamic_batch: bool = True,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    check: bool = True,
) -> onnx.ModelProto:
    """Trace the computation from ``inputs`` to the outputs and return an ONNX model.

    Args:
        inputs: the input Tensor(s) (their values are used for the trace).
        outputs: what computes the outputs from the inputs: a Layer/Model (traced in
            eval mode, its states become initializers named by their dotted names) or a
            function of the input tensors (leaf tensors that store gradients become
            initializers, named by ``Tensor.name`` or ``param_<k>``). Tensors computed
            earlier cannot be traced after the fact: pass the function that made them.
        model_name: the ONNX graph's name.
        opset: the default-domain opset (default 17).
        dynamic_batch: make axis 0 of the inputs (and of the values carrying it) symbolic.
        input_names / output_names: value names (default ``input``/``output`` or
            ``input_<i>``/``output_<i>``).
        check: run ``onnx.checker.check_model(..., full_check=True)``.

    Example::

        model.eval()
        onnx_model = sonnx.to_onnx([x], model)
        onnx.save(onnx_model, "model.onnx")
    """
    from singa.layer.base import Layer

    inputs = _as_tensors(inputs)
    if not inputs:
        raise ValueError("ONNX export: at least one input tensor is needed")
    opset = _check_opset(opset)
    if isinstance(outputs, Layer):
        model = outputs
        tracer, outs = _trace(lambda *xs: _run_layer(model, xs), inputs, model)
        params = _model_params(model)
    elif callable(outputs):
        tracer, outs = _trace(outputs, inputs)
        params = _leaf_params(tracer)
    else:
        raise TypeError(
            "ONNX export: `outputs` must be the Layer/Model or the function that computes the outputs "
            "from the inputs (already computed tensors carry no trace)"
        )
    result = _convert(
        tracer, inputs, outs, params, opset, dynamic_batch, input_names, output_names, model_name
    )
    if check:
        onnx.checker.check_model(result, full_check=True)
    return result


def _run_layer(layer: Any, xs: Sequence[Tensor]) -> Any:
    """Call a layer's forward directly (bypassing graph replay), initializing it first."""
    from singa.layer.base import Layer

    if not getattr(layer, "_initialized", True):
        return Layer.__call__(layer, *xs)
    return layer.forward(*xs)


def export_model(
    model: Any,
    path: str | os.PathLike | None,
    inputs: Any,
    opset: int | None = None,
    dynamic_batch: bool = True,
    **kwargs: Any,
) -> onnx.ModelProto:
    """Export ``model`` (traced on ``inputs`` in eval mode) to an ONNX file at ``path``
    (not written when ``path`` is None) and return the ``onnx.ModelProto``.

    BatchNorm uses its running statistics, Dropout is an identity; parameters and buffers
    are initializers named by their dotted state names. ``kwargs`` go to :func:`to_onnx`
    (``input_names``, ``output_names``, ``model_name``).
    """
    kwargs.setdefault("model_name", type(model).__name__)
    m = to_onnx(inputs, model, opset=opset, dynamic_batch=dynamic_batch, **kwargs)
    if path is not None:
        onnx.save(m, os.fspath(path))
    return m


def save(model: onnx.ModelProto, path: str | os.PathLike) -> None:
    """Write an ONNX model to ``path`` (``onnx.save``)."""
    onnx.save(model, os.fspath(path))


__all__ = [
    "DEFAULT_OPSET",
    "ExportContext",
    "ExportError",
    "TensorProto",
    "export_model",
    "max_opset",
    "onnx_dtype",
    "save",
    "to_onnx",
]
