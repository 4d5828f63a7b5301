"""ONNX's sequence and optional types: the Sequence* operators, SplitToSequence,
ConcatFromSequence, SequenceMap, Optional, OptionalHasElement and OptionalGetElement.

Values are those of :mod:`singa.sonnx.values`: a sequence is a
:class:`~singa.sonnx.values.TensorSequence` of the Tensors themselves and an optional is
None (empty) or its element. So gradients pass through where that is natural: a tensor
put into a sequence (SequenceConstruct, SequenceInsert) and taken out again
(SequenceAt, OptionalGetElement) is the same Tensor; SplitToSequence slices and
ConcatFromSequence concatenates with autograd operators (``Slice``, ``Squeeze``,
``Cat``, ``Unsqueeze``). SequenceLength and OptionalHasElement compute integer and
boolean values, without a gradient (as Shape does). These operators have no autograd
operator of their own, so nothing here is exported (``EXPORT`` is empty).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa import autograd
from singa.autograd import shaping as sh
from singa.sonnx.context import NodeContext, builds, np_dtype, runs_subgraphs
from singa.sonnx.values import TensorSequence, takes_any_value
from singa.tensor import Tensor


def _sequence(ctx: NodeContext, x: Any, what: str = "input") -> TensorSequence:
    if not isinstance(x, TensorSequence):
        raise TypeError(f"ONNX run: {ctx.op_type} node {ctx.name!r}: {what} must be a sequence, got {x!r}")
    return x


def _position(ctx: NodeContext, t: Tensor | None, n: int, default: int, inserting: bool = False) -> int:
    """A sequence position (negative counts from the end) in range: ``[-n, n - 1]``, or
    ``[-n, n]`` when inserting; ``default`` when the input is absent."""
    if t is None:
        return default
    p = int(np.asarray(ctx.static(t)).reshape(-1)[0])
    hi = n if inserting else n - 1
    if not -n <= p <= hi:
        raise ValueError(
            f"ONNX run: {ctx.op_type} node {ctx.name!r}: position {p} is out of range for a sequence "
            f"of {n} tensor(s) (valid: {-n}..{hi})"
        )
    return p + n if p < 0 else p


def _same_dtype(ctx: NodeContext, seq: TensorSequence, items: list) -> TensorSequence:
    try:
        return TensorSequence(items, seq.dtype)
    except TypeError as e:
        raise TypeError(f"ONNX run: {ctx.op_type} node {ctx.name!r}: {e}") from None


@takes_any_value
@builds()
def handle_sequence_construct(ctx: NodeContext, xs: list) -> TensorSequence:
    """SequenceConstruct(inputs...): the sequence of the input tensors (one dtype)."""
    return _same_dtype(ctx, TensorSequence(), list(xs))


@takes_any_value
@builds()
def handle_sequence_empty(ctx: NodeContext, xs: list) -> TensorSequence:
    """SequenceEmpty(dtype): an empty sequence of that element type (float32 by default)."""
    return TensorSequence((), np_dtype(ctx, int(ctx.attr("dtype", 1))))


@takes_any_value
@builds()
def handle_sequence_at(ctx: NodeContext, xs: list) -> Tensor:
    """SequenceAt(seq, position): the tensor at ``position`` (the tensor itself, so a
    gradient reaches it)."""
    seq = _sequence(ctx, xs[0])
    return seq[_position(ctx, xs[1], len(seq), 0)]


@takes_any_value
@builds()
def handle_sequence_insert(ctx: NodeContext, xs: list) -> TensorSequence:
    """SequenceInsert(seq, tensor, position): a new sequence with ``tensor`` inserted at
    ``position`` (at the end when absent); the tensor's dtype must be the sequence's."""
    seq = _sequence(ctx, xs[0])
    p = _position(ctx, xs[2] if len(xs) > 2 else None, len(seq), len(seq), inserting=True)
    items = list(seq)
    items.insert(p, xs[1])
    return _same_dtype(ctx, seq, items)


@takes_any_value
@builds()
def handle_sequence_erase(ctx: NodeContext, xs: list) -> TensorSequence:
    """SequenceErase(seq, position): a new sequence without the tensor at ``position``
    (the last when absent)."""
    seq = _sequence(ctx, xs[0])
    if not seq:
        raise ValueError(f"ONNX run: SequenceErase node {ctx.name!r}: the sequence is empty")
    p = _position(ctx, xs[1] if len(xs) > 1 else None, len(seq), len(seq) - 1)
    items = list(seq)
    del items[p]
    return _same_dtype(ctx, seq, items)


@takes_any_value
@builds()
def handle_sequence_length(ctx: NodeContext, xs: list) -> Tensor:
    """SequenceLength(seq): the number of tensors, an int64 scalar."""
    return ctx.const(np.int64(len(_sequence(ctx, xs[0]))))


def _split_sizes(ctx: NodeContext, split: Tensor | None, d: int) -> tuple[list[int], bool]:
    """The sizes SplitToSequence cuts an axis of size ``d`` into, and whether the
    pieces are one element each with the axis removed (no ``split`` input)."""
    if split is None:
        return [1] * d, not int(ctx.attr("keepdims", 1))
    s = np.asarray(ctx.static(split)).astype(np.int64)
    if s.ndim == 0:
        if s <= 0:
            raise ValueError(f"ONNX run: SplitToSequence node {ctx.name!r}: split {int(s)} must be positive")
        return [min(int(s), d - i) for i in range(0, d, int(s))], False
    if s.sum() != d or (s < 0).any():
        raise ValueError(
            f"ONNX run: SplitToSequence node {ctx.name!r}: split sizes {s.tolist()} do not add up to "
            f"the axis' size {d}"
        )
    return s.tolist(), False


@builds(sh.Slice, sh.Squeeze)
def handle_split_to_sequence(ctx: NodeContext, xs: list) -> TensorSequence:
    """SplitToSequence(input, split; axis, keepdims): the pieces of ``input`` along
    ``axis``: of the given sizes (a 1-D ``split``), of ``split`` elements each (a scalar;
    the last may be shorter), or of one element each without ``split`` (and without the
    axis when ``keepdims`` is 0)."""
    x = xs[0]
    axis = int(ctx.attr("axis", 0)) % x.ndim()
    sizes, squeeze = _split_sizes(ctx, xs[1] if len(xs) > 1 else None, x.shape[axis])
    out, start = [], 0
    for size in sizes:
        piece = autograd.slice(x, [start], [start + size], [axis])
        out.append(autograd.squeeze(piece, [axis]) if squeeze else piece)
        start += size
    return TensorSequence(out, x.dtype)


@takes_any_value
@builds(sh.Cat, sh.Unsqueeze)
def handle_concat_from_sequence(ctx: NodeContext, xs: list) -> Tensor:
    """ConcatFromSequence(seq; axis, new_axis): the tensors concatenated along ``axis``,
    or stacked along a new axis ``axis`` when ``new_axis`` is 1."""
    seq = _sequence(ctx, xs[0])
    if not seq:
        raise ValueError(f"ONNX run: ConcatFromSequence node {ctx.name!r}: the sequence is empty")
    axis = int(ctx.attr("axis"))
    items = list(seq)
    if int(ctx.attr("new_axis", 0)):
        axis %= items[0].ndim() + 1
        items = [autograd.unsqueeze(t, [axis]) for t in items]
    return items[0] if len(items) == 1 else autograd.cat(items, axis)


@runs_subgraphs
@takes_any_value
@builds()
def handle_sequence_map(ctx: NodeContext, xs: list) -> list:
    """SequenceMap(seq, more...): runs ``body`` once per position of ``seq``; each
    further input is a sequence of the same length (its tensor at that position is
    given) or a tensor (given each time); each body output becomes a sequence."""
    body = ctx.subgraphs["body"]
    n = len(_sequence(ctx, xs[0]))
    lengths = {len(x) for x in xs if isinstance(x, TensorSequence)}
    if lengths != {n}:
        raise ValueError(
            f"ONNX run: SequenceMap node {ctx.name!r}: input sequences of different lengths {sorted(lengths)}"
        )
    outs: list[list] = [[] for _ in body.output_names]
    for i in range(n):
        args = [x[i] if isinstance(x, TensorSequence) else x for x in xs]
        for k, y in enumerate(body.run(args, ctx.scope, ctx.training)):
            outs[k].append(y)
    return [_same_dtype(ctx, TensorSequence(), items) for items in outs]


@takes_any_value
@builds()
def handle_optional(ctx: NodeContext, xs: list) -> Any:
    """Optional(input; type): an optional holding ``input``, or an empty one (None)
    without an input."""
    return xs[0] if xs else None


@takes_any_value
@builds()
def handle_optional_has_element(ctx: NodeContext, xs: list) -> Tensor:
    """OptionalHasElement(input): a bool scalar, false for an empty optional or no input."""
    return ctx.const(np.bool_(bool(xs) and xs[0] is not None))


@takes_any_value
@builds()
def handle_optional_get_element(ctx: NodeContext, xs: list) -> Any:
    """OptionalGetElement(input): the optional's element (a tensor or sequence given as
    it is); an empty optional is an error."""
    if not xs or xs[0] is None:
        raise ValueError(f"ONNX run: OptionalGetElement node {ctx.name!r}: the optional is empty")
    return xs[0]


EXPORT: dict = {}
IMPORT = {
    "ConcatFromSequence": handle_concat_from_sequence,
    "Optional": handle_optional,
    "OptionalGetElement": handle_optional_get_element,
    "OptionalHasElement": handle_optional_has_element,
    "SequenceAt": handle_sequence_at,
    "SequenceConstruct": handle_sequence_construct,
    "SequenceEmpty": handle_sequence_empty,
    "SequenceErase": handle_sequence_erase,
    "SequenceInsert": handle_sequence_insert,
    "SequenceLength": handle_sequence_length,
    "SequenceMap": handle_sequence_map,
    "SplitToSequence": handle_split_to_sequence,
}
