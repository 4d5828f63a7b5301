"""Export of tensors already computed (SINGA's ``sonnx.to_onnx(inputs, [y])``): walk
the autograd graph recorded while the outputs were computed and turn it into a function
of new input tensors, which the tracing exporter then traces like any other.

What the graph holds (see :mod:`singa.autograd.engine`): an Operation called while
autograd records keeps ``src``, per input its creator and output index, or, for a leaf
(parameters, input batches, labels, constants), the tensor itself. Walking back from the
outputs' creators gives every operator, in topological order, and every leaf tensor,
which is

* one of ``inputs`` (the same Tensor, or a Tensor of the same array): a graph input;
  a tensor holding exactly an input's elements (``flatten(x)`` run under ``no_grad()``,
  which records nothing) is that input reshaped to ``(-1, *shape[1:])``;
* a tensor that stores its gradient: a parameter, exported as a named initializer;
* a state input of an operator with a training mode (BatchNorm's running statistics):
  a named initializer too (:meth:`RecordedGraph.state_names`);
* anything else (an input batch not listed, labels, a constant made in forward): a
  constant.

The replay calls *shallow copies* of the recorded operators on the new tensors, never
the recorded operators themselves, whose ``src`` and ``cache`` the user's ``backward``
still needs. Operators recorded in training mode are replayed in their inference form
(BatchNorm with its running statistics, Dropout as the identity), as a model is exported
in eval mode; no state array is touched.

Before the export, :meth:`RecordedGraph.verify` replays the graph as it was recorded
(BatchNorm with batch statistics on copies of its running statistics, Dropout with its
recorded mask) and checks that it reproduces the given output values.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from singa import autograd
from singa.autograd.dropout import Dropout
from singa.autograd.normalization import BatchNorm2d
from singa.tensor import Tensor

_HOW_TO_RECORD = (
    "compute the outputs from the same input tensors right before exporting, outside no_grad() "
    "(y = model.forward(x); in training or evaluation mode), or pass the model (or a function) that "
    "computes them instead of the tensors"
)


class RecordError(RuntimeError):
    """The recorded graph cannot be exported (the exporter re-raises it as ExportError)."""


def are_tensors(outputs: Any) -> bool:
    """True for a Tensor or a non-empty list/tuple of Tensors."""
    if isinstance(outputs, Tensor):
        return True
    return isinstance(outputs, list | tuple) and bool(outputs) and all(isinstance(o, Tensor) for o in outputs)


def _same_buffer(a: Any, b: Any) -> bool:
    """``a`` holds exactly the elements of ``b`` in the same order (a reshaped view)."""
    if a.size != b.size or a.dtype != b.dtype or a.size == 0:
        return False
    if not (a.flags.c_contiguous and b.flags.c_contiguous) or type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    return a.data.ptr == b.data.ptr


def _host(a: Any) -> np.ndarray:
    return np.asarray(a) if isinstance(a, np.ndarray | np.generic) else a.get()


class RecordedGraph:
    """The operators and leaves reachable from ``outputs`` through the recorded ``src``.

    Args:
        inputs: the tensors that become graph inputs (matched by identity or by array).
        outputs: the computed output tensors.

    Attributes:
        order: the recorded operators, each after the ones producing its inputs.
        used: indices of the inputs the outputs depend on.
    """

    def __init__(self, inputs: Sequence[Tensor], outputs: Sequence[Tensor]):
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self._by_tensor = {id(t): k for k, t in enumerate(self.inputs)}
        self._by_array = {id(t.data): k for k, t in enumerate(self.inputs)}
        self.used: set[int] = set()
        self.order: list = []
        self._args: dict[int, list] = {}
        self._outs = [self._output_ref(j, y) for j, y in enumerate(self.outputs)]
        self._walk([r[1] for r in self._outs if r[0] == "op"])
        if not self.used:
            raise RecordError(self._unused_message())

    def _unused_message(self) -> str:
        """Why no input was reached."""
        return (
            "ONNX export: the outputs do not depend on the inputs through recorded operators "
            "(were they computed under no_grad(), or from other input tensors?); " + _HOW_TO_RECORD
        )

    # ----- walking ---------------------------------------------------------------------------------
    def _leaf(self, t: Tensor) -> tuple:
        k = self._by_tensor.get(id(t))
        if k is None:
            k = self._by_array.get(id(t.data))
        if k is not None:
            self.used.add(k)
            return ("x", k)
        for k, x in enumerate(self.inputs):
            if t.ndim() > 0 and _same_buffer(t.data, x.data):
                # a reshape of an input not recorded (flatten(x) under no_grad), but the
                # same elements: replayed as reshape(x, (-1, *rest))
                self.used.add(k)
                return ("xr", k, tuple(t.shape[1:]))
        return ("leaf", t)

    def _output_ref(self, j: int, y: Tensor) -> tuple:
        if y.creator is not None:
            return ("op", y.creator, y._index)
        if id(y) in self._by_tensor or id(y.data) in self._by_array:
            return self._leaf(y)
        raise RecordError(
            f"ONNX export: output {j} (shape {y.shape}) has no recorded graph: it was computed while "
            "autograd was not recording (inside no_grad()), or by a Model in graph mode "
            "(compile(..., use_graph=True): its training steps and forward calls replay a compiled "
            "graph, whose outputs carry no autograd graph; y = model.forward(x) runs eagerly); "
            + _HOW_TO_RECORD
        )

    def _walk(self, roots: list) -> None:
        state: dict[int, bool] = {}  # op id -> done
        stack = [(op, False) for op in reversed(roots)]
        while stack:
            op, expanded = stack.pop()
            if expanded:
                state[id(op)] = True
                self.order.append(op)
                continue
            if id(op) in state:
                continue
            state[id(op)] = False
            src = op.src
            if src is None:
                raise RecordError(
                    f"ONNX export: the recorded graph of {type(op).__name__} was released (backward, or an "
                    "optimizer step, ran through it); export before calling backward: compute the outputs "
                    "again (autograd.training = True; y = model.forward(x)), or pass the model instead of "
                    "the tensors"
                )
            refs = []
            children = []
            for i, s in enumerate(src):
                if s is None:
                    raise RecordError(
                        f"ONNX export: input {i} of the recorded {type(op).__name__} was not kept by the "
                        "recording; " + _HOW_TO_RECORD
                    )
                creator, idx, t = s
                if creator is not None:
                    refs.append(("op", creator, idx))
                    children.append(creator)
                else:
                    refs.append(self._leaf(t))
            self._args[id(op)] = refs
            stack.append((op, True))
            for c in reversed(children):
                if id(c) not in state:
                    stack.append((c, False))

    # ----- replaying -------------------------------------------------------------------------------
    def _run(self, xs: Sequence[Tensor], recorded: bool) -> list:
        vals: dict[Any, tuple] = {}

        def value(ref: tuple) -> Any:
            if ref[0] == "x":
                return xs[ref[1]]
            if ref[0] == "leaf":
                return ref[1]
            if ref[0] == "xr":
                if ref not in vals:
                    vals[ref] = (autograd.reshape(xs[ref[1]], (-1, *ref[2])),)
                return vals[ref][0]
            return vals[id(ref[1])][ref[2]]

        for op in self.order:
            args = [value(r) for r in self._args[id(op)]]
            c = copy.copy(op)
            c.src = None
            c.cache = None
            c.requires_grad = False
            training = getattr(op, "training", None) is True
            if recorded and training:
                if isinstance(op, Dropout) and op.cache is not None:  # the recorded mask
                    x = args[0]
                    vals[id(op)] = (Tensor.wrap(x.data * op.cache, x.device),)
                    continue
                # batch statistics; in-place state updates go to copies
                args = [
                    Tensor.wrap(a.data.copy(), a.device) if r[0] == "leaf" and not a.stores_grad else a
                    for a, r in zip(args, self._args[id(op)])
                ]
            elif training:
                c.training = False
            try:
                vals[id(op)] = c(*args)
            except Exception as e:
                raise RecordError(self._replay_failure(op, xs, e)) from e
        return [value(r) for r in self._outs]

    def _replay_failure(self, op: Any, xs: Sequence[Tensor], e: Exception) -> str:
        msg = f"ONNX export: replaying the recorded {type(op).__name__} failed ({type(e).__name__}: {e})"
        b0 = self.inputs[0].shape[0] if self.inputs[0].ndim() > 0 else None
        b = xs[0].shape[0] if xs[0].ndim() > 0 else None
        if b0 is not None and b != b0:
            tied = sorted(
                {str(tuple(t.shape)) for t in self._constants() if t.ndim() > 0 and t.shape[0] == b0}
            )
            msg += (
                f" at batch size {b} (recorded at {b0}): the recording holds something tied to the batch "
                "size: a reshape target computed from x.shape, or a constant"
                + (f" (here of shape {', '.join(tied)})" if tied else "")
                + " such as labels (give them among the inputs); export with dynamic_batch=False, or pass "
                "the model instead of the tensors"
            )
        return msg

    def check_batch(self, states: set[int] = frozenset()) -> None:
        """For a dynamic batch: no recorded constant may have the batch size along axis 0
        (both traces would replay the same array, baking one batch into the file).
        Not counted: parameters, arrays in ``states`` (ids: the model's states) and the
        state inputs of operators with a mode (BatchNorm's running statistics). At batch 1
        any other constant of size 1 along axis 0 is refused as ambiguous."""
        if not self.inputs or self.inputs[0].ndim() == 0:
            return
        b = self.inputs[0].shape[0]
        skip = set(states)
        for op in self.order:
            if hasattr(op, "training"):
                skip.update(id(r[1].data) for r in self._args[id(op)][1:] if r[0] == "leaf")
        tied = sorted(
            {
                tuple(t.shape)
                for t in self._constants()
                if t.ndim() > 0 and t.shape[0] == b and id(t.data) not in skip
            }
        )
        if tied and b == 1:
            raise RecordError(
                f"ONNX export: traced at batch size 1, the recording holds constant(s) of shape "
                f"{', '.join(map(str, tied))} whose axis 0 has size 1: at batch 1 it is ambiguous whether "
                "they are per-example data (labels, values computed from the inputs) or constants that "
                "broadcast along the batch; trace at a batch size >= 2 (or export with dynamic_batch=False), "
                "and pass model= so that the model's own tensors (its states) are known as such"
            )
        if tied:
            shapes = ", ".join(map(str, tied))
            raise RecordError(
                f"ONNX export: the recording holds constant(s) of shape {shapes} whose axis 0 is the batch "
                f"size {b}, which a dynamic batch cannot replay: labels or other per-example data (give "
                "them among the inputs); for a genuine constant of that size export at another batch "
                "size, or with dynamic_batch=False"
            )

    def state_names(self) -> dict[int, str]:
        """The state inputs of the operators with a training mode (BatchNorm's running
        statistics): leaves that store no gradient, exported as initializers (so that
        a re-import makes them buffers). ``{id(array): name}``, named ``Tensor.name``
        or ``bn<k>.running_mean`` / ``bn<k>.running_var`` (k counting the BatchNorm
        operators), ``<op><k>.state<i>`` for other operators."""
        out: dict[int, str] = {}
        counts: dict[str, int] = {}
        for op in self.order:
            if not hasattr(op, "training"):
                continue
            kind = "bn" if isinstance(op, BatchNorm2d) else type(op).__name__.lower()
            k = counts.get(kind, 0)
            counts[kind] = k + 1
            for i, r in enumerate(self._args[id(op)]):
                if i == 0 or r[0] != "leaf" or r[1].stores_grad or id(r[1].data) in out:
                    continue
                if kind == "bn" and i in (3, 4):
                    default = f"bn{k}.{('running_mean', 'running_var')[i - 3]}"
                else:
                    default = f"{kind}{k}.state{i}"
                out[id(r[1].data)] = r[1].name or default
        return out

    def _constants(self) -> list[Tensor]:
        """The leaves that are neither inputs nor parameters."""
        return [
            r[1] for op in self.order for r in self._args[id(op)] if r[0] == "leaf" and not r[1].stores_grad
        ]

    def replay(self, *xs: Tensor) -> list:
        """The outputs recomputed from ``xs`` in inference form (for the tracer)."""
        with autograd.no_grad():
            outs = self._run(xs, recorded=False)
        if self.inputs and self.inputs[0].ndim() > 0 and xs[0].shape[0] != self.inputs[0].shape[0]:
            b0, b = self.inputs[0].shape[0], xs[0].shape[0]
            for j, (y, o) in enumerate(zip(self.outputs, outs)):
                if y.ndim() > 0 and y.shape[0] == b0 and o.shape[0] != b:
                    raise RecordError(
                        f"ONNX export: output {j} does not follow the batch size when the recording is "
                        f"replayed at batch size {b} (shape {o.shape}, recorded {y.shape}): an operator "
                        "recorded a size computed from the batch size; export with dynamic_batch=False, "
                        "or pass the model instead of the tensors"
                    )
        return outs

    def verify(self, rtol: float = 1e-4, atol: float = 1e-5) -> None:
        """Replay as recorded at the original inputs and check the given output values:
        a different shape is an error; different values (parameters updated since the
        outputs were computed) give a warning, and the current values are exported."""
        with autograd.no_grad():
            outs = self._run(self.inputs, recorded=True)
        for j, (y, o) in enumerate(zip(self.outputs, outs)):
            want, got = _host(y.data), _host(o.data)
            if want.shape != got.shape:
                raise RecordError(
                    f"ONNX export: replaying the recording gives output {j} the shape {got.shape}, "
                    f"the given tensor has {want.shape}"
                )
            if want.size == 0:
                continue
            scale = max(1.0, float(np.abs(want).max()))
            err = float(np.abs(got.astype(np.float64) - want).max())
            if not np.isfinite(err) or err > atol * scale + rtol * float(np.abs(want).max()):
                if np.array_equal(want, got, equal_nan=True):
                    continue
                warnings.warn(
                    f"ONNX export: replaying the recorded operators does not reproduce output {j} "
                    f"(max abs diff {err:.3g}): an input or a parameter changed after the output was "
                    "computed (an optimizer step, an in-place update); the file holds the current "
                    "values, as SINGA's export does (compute the outputs again right before exporting "
                    "to silence this)",
                    UserWarning,
                    stacklevel=4,
                )
                return
