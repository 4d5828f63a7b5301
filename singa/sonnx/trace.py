"""Tracing for the exporter: run ``forward`` with a recorder on the device and keep
every forward operator call with its input and output arrays.

For a dynamic batch the computation is traced twice, at the given batch size B and at
B + 1 (the inputs' rows repeated cyclically). The two traces must run the same
operators in the same order; comparing them shows exactly which dims and which
operator attributes depend on the batch size, so the converters can write those with
ONNX's dynamic forms (``0``/``-1`` in a Reshape, equal Splits, open-ended Slices) and
refuse what cannot be written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from singa import autograd
from singa.sonnx import layer_export
from singa.tensor import Tensor

_ENGINE_FIELDS = {"name", "src", "requires_grad", "needs_grad", "cache", "n_out", "out_meta"}


class TraceError(RuntimeError):
    """The computation could not be traced for export."""


class Record:
    """One forward operator call: the Operation, its input and output arrays, and the
    label of the innermost layer whose ``forward`` was running."""

    __slots__ = ("op", "ins", "outs", "layer")

    def __init__(self, op: Any, ins: list, outs: tuple, layer: str):
        self.op = op
        self.ins = ins
        self.outs = outs
        self.layer = layer


class Tracer:
    """The recorder installed as ``dev.recorder`` while ``forward`` runs (the protocol
    of :mod:`singa.autograd.engine`); only forward operator calls are kept."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.layer_stack: list[str] = []
        self.keep: list[Any] = []  # every seen array stays alive, so ids stay unique

    def record(self, fn, in_arrays, out_arrays, op=None, tensors=None, is_backward=False):
        """Keep a forward operator call."""
        if op is None or is_backward:
            return
        ins = list(in_arrays)
        outs = tuple(out_arrays)
        self.keep.append((ins, outs, tensors))
        layer = self.layer_stack[-1] if self.layer_stack else ""
        self.records.append(Record(op, ins, outs, layer))

    def leaf_params(self) -> dict[int, str]:
        """Arrays of leaf tensors that store gradients, named ``Tensor.name`` or
        ``param_<k>`` (the initializers of a trace without a model)."""
        out: dict[int, str] = {}
        for _, _, tensors in self.keep:
            for t in tensors or ():
                if isinstance(t, Tensor) and t.stores_grad and t.creator is None and id(t.data) not in out:
                    out[id(t.data)] = t.name or f"param_{len(out)}"
        return out


def _wrap_forward(tracer: Tracer, label: str, layer: Any) -> Callable:
    original = layer.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        tracer.layer_stack.append(label)
        start = len(tracer.records)
        try:
            out = original(*args, **kwargs)
        finally:
            tracer.layer_stack.pop()
        if layer_export.exports_whole(layer, args, kwargs):  # one ONNX RNN/LSTM/GRU node per layer
            del tracer.records[start:]
            ins = [args[0].data] + [p.data for p in layer_export.layer_params(layer)]
            outs = tuple(t.data for t in out)
            tracer.keep.append((ins, outs, None))
            tracer.records.append(Record(layer_export.LayerCall(layer), ins, outs, label))
        return out

    return forward


def layer_label(name: str, layer: Any) -> str:
    """``name (Class)`` for error messages and node names."""
    return f"{name} ({type(layer).__name__})" if name else type(layer).__name__


def trace(fn: Callable, inputs: Sequence[Tensor], model: Any = None) -> tuple[Tracer, list]:
    """Run ``fn(*inputs)`` under a tracer with autograd recording off (and ``model`` with
    every sublayer in eval mode, their modes restored after); returns the tracer and
    the output tensors."""
    devs = {id(t.device): t.device for t in inputs}
    tracer = Tracer()
    patched = []
    modes = []
    if model is not None:
        for name, layer in [("", model)] + list(model.sublayers().items()):
            modes.append((layer, layer.training))
            layer.training = False
            layer.forward = _wrap_forward(tracer, layer_label(name, layer), layer)
            patched.append(layer)
    for d in devs.values():
        if d.recorder is not None:
            for layer in patched:
                del layer.forward
            for layer, mode in modes:
                layer.training = mode
            raise TraceError(f"ONNX export: device {d} is already being traced (graph mode is recording)")
    for d in devs.values():
        d.recorder = tracer
    try:
        with autograd.no_grad():
            out = fn(*inputs)
    finally:
        for d in devs.values():
            d.recorder = None
        for layer in patched:
            del layer.forward
        for layer, mode in modes:
            layer.training = mode
    outs = [out] if isinstance(out, Tensor) else list(out) if isinstance(out, list | tuple) else None
    if outs is None or not all(isinstance(o, Tensor) for o in outs):
        raise TraceError(f"ONNX export: forward must return Tensor(s), got {type(out).__name__}")
    return tracer, outs


def grow_batch(t: Tensor, batch: int) -> Tensor:
    """``t`` with batch + 1 rows along axis 0 (its rows repeated cyclically)."""
    idx = np.arange(batch + 1) % batch
    xp = t.device.xp
    return Tensor.wrap(t.data[xp.asarray(idx) if xp is not np else idx], t.device)


def grow_axes(t: Tensor, axes: Any) -> Tensor:
    """``t`` one longer along each of ``axes`` (its entries repeated cyclically): the
    second trace's input for axes other than the batch that are dynamic."""
    xp = t.device.xp
    data = t.data
    for ax in axes:
        n = data.shape[ax]
        idx = np.arange(n + 1) % n
        data = xp.take(data, xp.asarray(idx) if xp is not np else idx, axis=ax)
    return Tensor.wrap(data, t.device)


def op_attrs(op: Any) -> dict:
    """The operator's hyperparameters (public attributes, engine fields excluded)."""
    return {k: v for k, v in vars(op).items() if not k.startswith("_") and k not in _ENGINE_FIELDS}


def same(a: Any, b: Any) -> bool:
    """Structural equality of attribute values (arrays, slices and nested tuples)."""
    if a is b:
        return True
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if hasattr(a, "shape") and hasattr(b, "shape"):
        ha = a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)
        hb = b.get() if hasattr(b, "get") and not isinstance(b, np.ndarray) else np.asarray(b)
        return ha.shape == hb.shape and ha.dtype == hb.dtype and bool(np.array_equal(ha, hb, equal_nan=True))
    if hasattr(a, "shape") or hasattr(b, "shape"):
        return False
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:
        return False


def align(t1: Tracer, t2: Tracer, b1: int, b2: int) -> None:
    """Check that two traces ran the same operators in the same order."""
    r1, r2 = t1.records, t2.records
    for i, (a, b) in enumerate(zip(r1, r2)):
        if type(a.op) is not type(b.op) or len(a.ins) != len(b.ins) or len(a.outs) != len(b.outs):
            where = f" in layer {a.layer}" if a.layer else ""
            raise TraceError(
                f"ONNX export: forward runs different operators at batch sizes {b1} and {b2} "
                f"(operator #{i}: {type(a.op).__name__}{where} with {len(a.ins)} inputs and {len(a.outs)} "
                f"outputs vs {type(b.op).__name__} with {len(b.ins)} and {len(b.outs)}); "
                "export with dynamic_batch=False"
            )
    if len(r1) != len(r2):
        raise TraceError(
            f"ONNX export: forward runs {len(r1)} operators at batch size {b1} and {len(r2)} at {b2} "
            "(is axis 0 of the inputs really the batch axis?); export with dynamic_batch=False"
        )
