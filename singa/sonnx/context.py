"""What ONNX converters and import handlers work with, shared by every family module.

Export side: :class:`ExportContext` (the graph being written), :class:`ExportError`,
:func:`batch_aware`, and helpers (:func:`onnx_dtype`, :func:`cast_to`, :func:`host_array`).
Import side: :class:`NodeContext` (the node being evaluated), :class:`UnsupportedOperator`,
:func:`builds`, and helpers (:func:`keep_dtype`, :func:`np_dtype`, :func:`spatial_pads`).

This module imports neither the exporter (:mod:`singa.sonnx.export`) nor the backend
(:mod:`singa.sonnx.backend`): both import it, and so do the family modules in
:mod:`singa.sonnx.families`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from singa import autograd
from singa.kernels import conv_geometry
from singa.tensor import Tensor

BATCH_DIM = "batch"

# ==============================================================================================
# Export


class ExportError(RuntimeError):
    """An operator (or a model) that cannot be exported to ONNX."""


def host_array(a: Any) -> np.ndarray:
    """A numpy copy of a numpy or cupy array."""
    if isinstance(a, np.ndarray | np.generic):
        return np.asarray(a)
    return a.get()


def onnx_dtype(dtype: Any) -> int:
    """The ONNX element type of a numpy dtype."""
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


class ExportContext:
    """What a converter sees: the opset, value names and shapes, and ways to add nodes.

    Attributes:
        opset: the default-domain opset being written.
        dynamic_batch: axis 0 of the inputs is symbolic (the graph was traced twice).
        batch, batch2: the batch sizes of the two traces (batch2 None without a
            dynamic batch).
        layer: the label of the layer the current operator came from.
        op2, ins2, outs2: the current operator and its arrays in the second trace
            (None without a dynamic batch).
    """

    def __init__(self, opset: int, dynamic_batch: bool, batch: int | None, batch2: int | None):
        self.opset = opset
        self.dynamic_batch = dynamic_batch
        self.batch = batch
        self.batch2 = batch2
        self.nodes: list[onnx.NodeProto] = []
        self.layer = ""
        self.op2: Any = None
        self.ins2: list | None = None
        self.outs2: tuple | None = None
        self._names: set[str] = set()
        self._counter: dict[str, int] = {}
        self._shapes: dict[str, tuple] = {}
        self._shapes2: dict[str, tuple] = {}

    # names --------------------------------------------------------------------------------
    def reserve(self, name: str) -> str:
        """Claim ``name`` (or ``name_1``, ... if taken) as a value name."""
        base, k = name, 0
        while name in self._names:
            k += 1
            name = f"{base}_{k}"
        self._names.add(name)
        return name

    def taken(self, name: str) -> bool:
        """True when ``name`` is already a value name."""
        return name in self._names

    def claim(self, name: str) -> None:
        """Claim ``name`` exactly (a graph output's requested name)."""
        self._names.add(name)

    def fresh(self, hint: str = "t") -> str:
        """A new unique value name."""
        k = self._counter.get(hint, 0)
        while f"{hint}_{k}" in self._names:
            k += 1
        self._counter[hint] = k + 1
        return self.reserve(f"{hint}_{k}")

    # shapes -------------------------------------------------------------------------------------
    def set_shapes(self, name: str, shape: tuple, shape2: tuple | None) -> None:
        """Record the shapes of value ``name`` in the two traces."""
        self._shapes[name] = tuple(shape)
        if shape2 is not None:
            self._shapes2[name] = tuple(shape2)

    @property
    def shapes(self) -> dict[str, tuple]:
        """The traced shape of every value named so far."""
        return self._shapes

    def shape(self, name: str) -> tuple:
        """The traced shape of value ``name``."""
        return self._shapes[name]

    def varying(self, name: str) -> tuple:
        """Per axis of value ``name``: whether its size depends on the batch size."""
        s1 = self._shapes.get(name, ())
        s2 = self._shapes2.get(name)
        if not self.dynamic_batch or s2 is None or len(s2) != len(s1):
            return (False,) * len(s1)
        return tuple(a != b for a, b in zip(s1, s2))

    def dims(self, name: str) -> list:
        """ONNX dims of value ``name``: ints, "batch" where the size is the batch
        size in both traces, ``<name>_dim<i>`` for other batch-dependent sizes."""
        s1 = self._shapes[name]
        s2 = self._shapes2.get(name, s1)
        out: list = []
        for i, (a, b) in enumerate(zip(s1, s2)):
            if a == b or not self.dynamic_batch:
                out.append(int(a))
            elif (a, b) == (self.batch, self.batch2):
                out.append(BATCH_DIM)
            else:
                out.append(f"{name}_dim{i}")
        return out

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
        arr = np.asarray(host_array(value) if not isinstance(value, list | tuple | int | float) else value)
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


def batch_aware(fn: Callable) -> Callable:
    """Mark a converter that handles operator attributes depending on the batch size
    itself (it compares ``op`` with ``ctx.op2``); for the others such attributes are an
    ExportError."""
    fn.batch_aware = True
    return fn


def cast_to(ctx: ExportContext, name: str, have: Any, want: Any) -> str:
    """``name`` cast to dtype ``want`` when its dtype ``have`` differs."""
    if np.dtype(have) == np.dtype(want):
        return name
    return ctx.node("Cast", [name], 1, to=onnx_dtype(want))[0]


# ==============================================================================================
# Import


class UnsupportedOperator(NotImplementedError):
    """An ONNX operator (or an attribute value of one) that the importer does not handle."""


class NodeContext:
    """What an import handler sees of its node.

    Attributes:
        node: the ``onnx.NodeProto``.
        op_type, name: the node's operator type and name (its first output if unnamed).
        attrs: the node's attributes as Python values.
        opset: the model's default-domain opset.
        device: the device tensors are created on.
        training: True when the graph runs in training mode (SONNXModel in train()).
        outputs: how many outputs the node asks for (trailing empty names dropped).
        states: ids of the arrays of the model's states in the current run (the
            tensors a training node may update in place, see :meth:`is_state`).
        subgraphs, scope: the node's subgraphs and the enclosing graph's values
            (control flow).
    """

    def __init__(self, node: onnx.NodeProto, opset: int, device: Any, training: bool):
        self.node = node
        self.op_type = node.op_type
        self.name = node.name or (node.output[0] if node.output else node.op_type)
        self.attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        for k, v in self.attrs.items():
            if isinstance(v, bytes):
                self.attrs[k] = v.decode()
            elif isinstance(v, list) and v and all(isinstance(e, bytes) for e in v):
                self.attrs[k] = [e.decode() for e in v]
        self.opset = opset
        self.device = device
        self.training = training
        outs = list(node.output)
        while outs and not outs[-1]:
            outs.pop()
        self.outputs = len(outs)
        self.states: frozenset = frozenset()
        #: the node's subgraphs by attribute name (If, Loop, Scan; set by the backend)
        self.subgraphs: dict = {}
        #: the values of the enclosing graph when the node runs (read by subgraphs)
        self.scope: dict = {}
        self._rng: Any = None

    def is_state(self, t: Tensor | None) -> bool:
        """True for a tensor of the model's states (a SONNXModel parameter or buffer),
        which a training node may update in place; anything else (a Constant, a
        computed value, an initializer of ``prepare``) must be copied first."""
        return t is not None and id(t.data) in self.states

    def attr(self, name: str, default: Any = None) -> Any:
        """The attribute ``name`` (``default`` when absent)."""
        return self.attrs.get(name, default)

    def static(self, t: Tensor | None) -> np.ndarray | None:
        """The value of an input as a host numpy array (shapes, axes, pads ...)."""
        if t is None:
            return None
        return t.to_numpy()

    def const(self, value: Any, dtype: Any = None) -> Tensor:
        """A constant tensor (no gradient) on this node's device."""
        arr = np.asarray(value, dtype=dtype)
        xp = self.device.xp
        keep = xp is np or arr.dtype == object  # strings stay numpy arrays on the host
        return Tensor.wrap(arr if keep else xp.asarray(arr), self.device)

    def wrap(self, arr: Any) -> Tensor:
        """Wrap an array computed directly (a non-differentiable result)."""
        return Tensor.wrap(arr, self.device)

    def generator(self) -> Any:
        """The node's random generator: one seeded by its ``seed`` attribute (a float; the
        generator is made once and its stream continues from run to run, as
        onnxruntime's does), else the device's generator (``device.set_rand_seed``)."""
        seed = self.attr("seed")
        if seed is None:
            return self.device.rng
        if self._rng is None:
            self._rng = np.random.default_rng(int(np.float64(seed).view(np.uint64)))
        return self._rng

    def unsupported(self, why: str) -> UnsupportedOperator:
        """An UnsupportedOperator naming the op type and node."""
        return UnsupportedOperator(f"ONNX import: {self.op_type} node {self.name!r}: {why}")


def builds(*ops: type) -> Callable:
    """Declare the autograd Operation classes an import handler builds (the main one
    first; none for a handler that computes its value at import time, such as Constant
    or Shape). A test checks every handler declares them and that each has an ONNX
    converter, so an imported graph is made of exportable autograd operators."""

    def mark(fn: Callable) -> Callable:
        fn.builds = ops
        return fn

    return mark


def inference_only(ctx: NodeContext, xs: Sequence[Any], what: str) -> None:
    """UnsupportedOperator naming the node when, in training mode, a tensor that needs a
    gradient flows into an operator computed without one (``what`` says which kind),
    instead of silently cutting the gradient."""
    if ctx.training and any(isinstance(x, Tensor) and x.requires_grad for x in xs):
        raise ctx.unsupported(f"{what} are inference-only (no gradient): run the model in eval mode")


def runs_subgraphs(fn: Callable) -> Callable:
    """Mark an import handler that runs its node's subgraphs (If, Loop, Scan,
    SequenceMap): the operators it builds are those of the bodies' handlers, which
    declare them."""
    fn.runs_subgraphs = True
    return fn


def keep_dtype(y: Tensor, dtype: Any) -> Tensor:
    """``y`` cast back to ``dtype`` when an operator promoted it."""
    return autograd.cast(y, dtype) if y.dtype != np.dtype(dtype) else y


def unary_handler(fn: Callable[[Tensor], Tensor], op: type) -> Callable:
    """The import handler of a one-input node computed by ``fn`` (which builds ``op``),
    its result kept in the input's dtype."""

    @builds(op)
    def handle(ctx: NodeContext, xs: list) -> Tensor:
        return keep_dtype(fn(xs[0]), xs[0].dtype)

    handle.__doc__ = f"{op.__name__} of the node's input, in the input's dtype."
    return handle


def np_dtype(ctx: NodeContext, onnx_type: int) -> np.dtype:
    """The numpy dtype of an ONNX element type; unsupported for types numpy lacks."""
    try:
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(onnx_type))
    except Exception as e:
        raise ctx.unsupported(f"element type {onnx_type} is not supported") from e
    if dt.kind not in "biuf" or dt.name not in NUMPY_TYPES:
        raise ctx.unsupported(f"element type {helper.tensor_dtype_to_string(onnx_type)} is not supported")
    return dt


NUMPY_TYPES = {
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
}


def spatial_pads(ctx: NodeContext, in_sizes: tuple, kernel: list, strides: list, dilations: list) -> list:
    """ONNX ``pads`` [x1_begin, x2_begin, ..., x1_end, ...] from ``pads`` or ``auto_pad``."""
    nd = len(in_sizes)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        return list(ctx.attr("pads", [0] * (2 * nd)))
    if auto == "VALID":
        return [0] * (2 * nd)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise ctx.unsupported(f"auto_pad {auto!r}")
    return list(conv_geometry.same_pads(auto, in_sizes, kernel, strides, dilations))
