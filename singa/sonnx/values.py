"""The values of an imported ONNX graph besides tensors: ONNX's sequence and optional types.

A value in a running graph is one of

- a tensor: a :class:`~singa.tensor.Tensor`;
- a sequence of tensors: a :class:`TensorSequence` (immutable; the sequence operators
  return new ones);
- an optional: ``None`` when empty, else its element (a Tensor or a TensorSequence),
  as onnxruntime hands optionals to Python.

Sequences hold the Tensors themselves, so a gradient reaches a tensor that went
through ``SequenceConstruct``/``SequenceInsert`` and came out of ``SequenceAt``.

At the edges of a run, :func:`feed` turns a user's value (arrays, lists of arrays,
None, or the ``TensorProto``/``SequenceProto``/``OptionalProto`` of ONNX's test data,
read with ``onnx.numpy_helper``) into a graph value by the input's declared type, and
:func:`to_user` turns graph outputs back (a sequence becomes a list, of numpy arrays or
of Tensors).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from singa.sonnx.context import UnsupportedOperator
from singa.tensor import Tensor

__all__ = ["TensorSequence", "value_kind", "feed", "to_user", "takes_any_value", "takes_any", "check_tensors"]


class TensorSequence:
    """An ONNX sequence value: an ordered, immutable list of Tensors of one dtype.

    Args:
        items: the tensors.
        dtype: the element type (needed for an empty sequence: ``SequenceEmpty``);
            None takes the first item's.

    Raises:
        TypeError: an item is not a Tensor, or the items' dtypes differ (from each
            other or from ``dtype``).
    """

    __slots__ = ("items", "dtype")

    def __init__(self, items: Iterable[Tensor] = (), dtype: Any = None):
        items = tuple(items)
        bad = [type(t).__name__ for t in items if not isinstance(t, Tensor)]
        if bad:
            raise TypeError(f"ONNX sequence: items must be tensors, got {', '.join(sorted(set(bad)))}")
        kinds = {t.dtype for t in items} | ({np.dtype(dtype)} if dtype is not None else set())
        if len(kinds) > 1:
            raise TypeError(f"ONNX sequence: items of different dtypes {sorted(str(k) for k in kinds)}")
        self.items: tuple[Tensor, ...] = items
        self.dtype: np.dtype | None = kinds.pop() if kinds else None

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Tensor]:
        return iter(self.items)

    def __getitem__(self, i: int) -> Tensor:
        return self.items[i]

    def __repr__(self) -> str:
        shapes = ", ".join(str(tuple(t.shape)) for t in self.items)
        return f"TensorSequence([{shapes}], dtype={self.dtype})"


def _element_kind(tp: onnx.TypeProto) -> str | None:
    """'tensor' or 'sequence' (of tensors) for the types an optional may hold, else None."""
    kind = tp.WhichOneof("value")
    if kind in (None, "tensor_type"):
        return "tensor"
    if kind == "sequence_type" and tp.sequence_type.elem_type.WhichOneof("value") in (None, "tensor_type"):
        return "sequence"
    return None


def value_kind(tp: onnx.TypeProto, what: str) -> str:
    """The kind of a declared value type: ``"tensor"``, ``"sequence"`` (of tensors) or
    ``"optional"`` (of a tensor or a sequence of tensors); ``what`` names the value in
    the UnsupportedOperator raised for any other type (maps, sparse tensors, sequences
    of sequences)."""
    kind = _element_kind(tp)
    if kind is not None:
        return kind
    if tp.WhichOneof("value") == "optional_type" and _element_kind(tp.optional_type.elem_type):
        return "optional"
    raise UnsupportedOperator(
        f"ONNX import: {what} has type {_describe(tp)} (tensors, sequences of tensors and "
        "optionals of either are supported)"
    )


def _describe(tp: onnx.TypeProto) -> str:
    """A type in words: "tensor", "sequence of map", "optional of sequence of tensor" ..."""
    kind = tp.WhichOneof("value") or "tensor_type"
    if kind == "sequence_type":
        return "sequence of " + _describe(tp.sequence_type.elem_type)
    if kind == "optional_type":
        return "optional of " + _describe(tp.optional_type.elem_type)
    return kind.removesuffix("_type")


def _tensor(value: Any, device: Any) -> Tensor:
    xp = device.xp
    if isinstance(value, Tensor):
        return value if value.device is device else Tensor.wrap(xp.asarray(value.to_numpy()), device)
    arr = numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)
    if arr.dtype.kind in "OU":  # strings: numpy arrays of str, kept on the host
        return Tensor.wrap(arr.astype(object), device)
    return Tensor.wrap(arr if xp is np else xp.asarray(arr), device)


def _sequence(value: Any, device: Any, name: str) -> TensorSequence:
    if isinstance(value, TensorSequence):
        return TensorSequence([_tensor(t, device) for t in value], value.dtype)
    if isinstance(value, onnx.SequenceProto):
        value = numpy_helper.to_list(value)
    if not isinstance(value, list | tuple):
        raise TypeError(
            f"ONNX run: input {name!r} is a sequence of tensors: give a list of arrays, "
            f"not {type(value).__name__}"
        )
    return TensorSequence([_tensor(v, device) for v in value])


def feed(value: Any, tp: onnx.TypeProto | None, device: Any, name: str = "input") -> Any:
    """The graph value of a user's ``value`` for an input of declared type ``tp`` (None:
    a tensor): a Tensor on ``device``, a TensorSequence (from a list of arrays or
    Tensors, or a ``SequenceProto``), or None (an empty optional, also from an
    ``OptionalProto`` without a value)."""
    kind = "tensor" if tp is None else value_kind(tp, f"input {name!r}")
    if kind == "optional" and tp is not None:
        if isinstance(value, onnx.OptionalProto):
            value = numpy_helper.to_optional(value)
        if value is None:
            return None
        tp = tp.optional_type.elem_type
        kind = _element_kind(tp)
    if kind == "sequence":
        return _sequence(value, device, name)
    return _tensor(value, device)


def to_user(value: Any, as_tensors: bool) -> Any:
    """A graph output as a run returns it: Tensors (``as_tensors``) or numpy arrays; a
    sequence as a list of them; an empty optional as None."""
    if isinstance(value, TensorSequence):
        return [to_user(t, as_tensors) for t in value]
    if isinstance(value, Tensor) and not as_tensors:
        return value.to_numpy()
    return value


def takes_any_value(fn: Callable) -> Callable:
    """Mark an import handler that reads sequence and optional values (the sequence
    and optional operators, Identity, control flow); other handlers are given tensors
    only (see :func:`check_tensors`)."""
    fn.takes_any_value = True
    return fn


def takes_any(fn: Callable) -> bool:
    """Whether handler ``fn`` is marked with :func:`takes_any_value`."""
    return bool(getattr(fn, "takes_any_value", False))


def check_tensors(op: str, node: str, names: Iterable[str], xs: Iterable[Any]) -> None:
    """A TypeError naming the node and input when a handler that takes tensors is
    given a sequence (ONNX's type rules forbid it; a hand-made graph may still do it)."""
    for n, x in zip(names, xs):
        if isinstance(x, TensorSequence):
            raise TypeError(f"ONNX run: {op} node {node!r}: input {n!r} is a sequence; {op} takes tensors")
