"""Training-graph fusion: BatchNorm with the ReLU (and residual sum) that follow it.

A convolutional network's blocks end in BatchNorm then ReLU, or BatchNorm, a residual
sum, then ReLU. Run in turn, the operators make a pass over the activations for the sum
and for the ReLU. Two rewrites:

- ``batchnorm+relu``: a BatchNorm whose only user is a ReLU. The BatchNorm node
  computes ``max(normalised, 0)`` directly
  (:meth:`~singa.autograd.normalization.BatchNorm2d.forward_relu`), the ReLU nodes pass
  their array through, and BatchNorm's backward applies ReLU's gradient gate
  (``dy * (y > 0)``) inside its own two passes
  (:meth:`~singa.autograd.normalization.BatchNorm2d.backward_gated`) instead of a pass
  of its own.
- ``batchnorm+add+relu``: a BatchNorm whose only user is a sum whose only user is a
  ReLU (a residual block's end). The BatchNorm node computes ``max(normalised +
  residual, 0)`` (:meth:`~singa.autograd.normalization.BatchNorm2d.forward_add_relu`);
  the sum and ReLU nodes only do their operators' bookkeeping for the backward, which
  runs as traced (the gated gradient feeds both branches, so it is made anyway).

Per element the same arithmetic runs, so the replay keeps the bits of eager execution.

:func:`fuse` rewrites the nodes of a traced training call (CPU, float32 parameters)
before :class:`~singa.model.graph.Graph` schedules them; the operators keep their
caches as the engine expects.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from singa.autograd.activation import ReLU
from singa.autograd.elementwise import Add
from singa.autograd.normalization import BatchNorm2d
from singa.model.graph import Node, Recorder

__all__ = ["fuse", "BATCHNORM_RELU", "BATCHNORM_ADD_RELU"]

#: the names :func:`fuse` counts its rewrites under
BATCHNORM_RELU = "batchnorm+relu"
BATCHNORM_ADD_RELU = "batchnorm+add+relu"
_FUSED_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


class _Rectified:
    """A BatchNorm fused with the ReLU after it: its forward node's work, and its
    backward node's, which reads the rectified output the forward kept."""

    def __init__(self, bn: BatchNorm2d):
        self.bn = bn
        self.y: Any = None

    def forward(self, x: Any, scale: Any, bias: Any, running_mean: Any, running_var: Any) -> Any:
        """BatchNorm's forward with ReLU applied in the same pass."""
        y = self.bn.forward_relu(x, scale, bias, running_mean, running_var)
        if self.bn.requires_grad:
            self.y = y
        return y

    def backward(self, dy: Any) -> Any:
        """BatchNorm's backward of the ReLU-gated ``dy``."""
        y, self.y = self.y, None
        return self.bn.backward_gated(dy, y)


def _alike(x: Any, residual: Any) -> bool:
    """Whether ``residual`` has ``x``'s shape, dtype and memory layout."""
    return residual.dtype == x.dtype and residual.shape == x.shape and residual.strides == x.strides


class _ResidualEnd:
    """A residual block's end, BatchNorm + sum + ReLU, computed by the BatchNorm node;
    the sum and ReLU nodes then fill their operators' caches. ``first`` says whether
    BatchNorm's output is the sum's first operand."""

    def __init__(self, bn: BatchNorm2d, add: Add, relu: ReLU, first: bool):
        self.bn, self.add, self.relu, self.first = bn, add, relu, first
        self.y: Any = None

    def forward(self, x: Any, scale: Any, bias: Any, mean: Any, var: Any, residual: Any) -> Any:
        """``max(BatchNorm(x) + residual, 0)``: one pass for float32 and float64 arrays of
        one shape, dtype and memory layout, else the three operators in turn (the sum
        of arrays laid out differently has a layout of numpy's choosing, which the
        next kernels' order of summation follows)."""
        stats = (scale, bias, mean, var)
        if x.dtype in _FUSED_FLOATS and _alike(x, residual):
            self.y = self.bn.forward_add_relu(x, *stats, residual)
        else:
            y = self.bn.forward(x, *stats)
            self.y = self.relu.forward(self.add.forward(*((y, residual) if self.first else (residual, y))))
        return self.y

    def sum_done(self, a: Any, b: Any) -> Any:
        """The sum node: its operator's bookkeeping; the sum is in :attr:`y` already."""
        self.add.sum_computed(a, b)
        return self.y

    def relu_done(self, y: Any) -> Any:
        """The ReLU node: its operator's bookkeeping; ``y`` is rectified already."""
        self.relu.output_computed(y)
        self.y = None
        return y


def _pass_through(a: Any) -> Any:
    """The ReLU nodes' work once fused: the array is rectified (forward) or will be
    gated by BatchNorm's backward (backward) already."""
    return a


def _backwards(nodes: list[Node]) -> dict[int, Node]:
    """Backward node of each operator, by the operator's id."""
    return {id(n.op): n for n in nodes if n.is_backward and n.op is not None}


def _uses(nodes: list[Node], out_slots: list[int]) -> Counter:
    return Counter(s for n in nodes for s in n.ins if s is not None) + Counter(out_slots)


def _forward_producers(nodes: list[Node]) -> dict[int, Node]:
    """The forward node producing each slot."""
    return {s: n for n in nodes if not n.is_backward for s in n.outs if s is not None}


def _sole_user_relus(nodes: list[Node], uses: Counter) -> list[Node]:
    """ReLU forward nodes that are the one user of their input."""
    return [n for n in nodes if not n.is_backward and type(n.op) is ReLU and n.ins and uses[n.ins[0]] == 1]


def _pairs(nodes: list[Node], uses: Counter) -> list[tuple[Node, Node]]:
    """(BatchNorm forward, ReLU forward) node pairs where the ReLU is the BatchNorm
    output's one user."""
    producer = _forward_producers(nodes)
    pairs = []
    for n in _sole_user_relus(nodes, uses):
        src = producer.get(n.ins[0])
        if src is not None and type(src.op) is BatchNorm2d and src.outs[0] == n.ins[0]:
            pairs.append((src, n))
    return pairs


def _triples(nodes: list[Node], uses: Counter, rec: Recorder) -> list[tuple[Node, Node, Node, int]]:
    """(BatchNorm, sum, ReLU forward nodes, BatchNorm's operand position in the sum)
    where each one's output has the next as its one user and the sum's operands have
    one rank (their shapes are checked on each call: :class:`_ResidualEnd`)."""
    producer = _forward_producers(nodes)
    triples = []
    for relu in _sole_user_relus(nodes, uses):
        add = producer.get(relu.ins[0])
        if add is None or type(add.op) is not Add or len(add.ins) != 2 or None in add.ins:
            continue
        for k, s in enumerate(add.ins):
            bn = producer.get(s)
            other = add.ins[1 - k]
            if bn is None or type(bn.op) is not BatchNorm2d or uses[s] != 1 or s == other:
                continue
            if rec.ndims[s] == rec.ndims[other]:
                triples.append((bn, add, relu, k))
                break
    return triples


def _moved_before(nodes: list[Node], moved: dict[int, Node]) -> list[Node]:
    """``nodes`` with each node of ``moved.values()`` taken out and put back just before
    the node whose index maps to it."""
    taken = {id(n) for n in moved.values()}
    order = []
    for n in nodes:
        if n.index in moved:
            order.append(moved[n.index])
        if id(n) not in taken:
            order.append(n)
    return order


def _backward_fits(bn_back: Node | None, relu_back: Node | None, uses: Counter) -> bool:
    """Whether the backward nodes take the fused form: none ran (a forward without
    backward), or the ReLU's gradient goes to BatchNorm's backward alone."""
    if relu_back is None:
        return bn_back is None
    gate_out = relu_back.outs[0] if relu_back.outs else None
    return (
        bn_back is not None
        and gate_out is not None
        and bool(bn_back.ins)
        and bn_back.ins[0] == gate_out
        and uses[gate_out] == 1
    )


def fuse(rec: Recorder, out_slots: list[int]) -> Counter:
    """Rewrite ``rec.nodes`` of a traced training call on the CPU as the module
    docstring says. Returns how many times each rewrite applied
    (``Counter({"batchnorm+relu": n, "batchnorm+add+relu": m})``)."""
    counts: Counter = Counter()
    if rec.dev.is_gpu:
        return counts
    uses = _uses(rec.nodes, out_slots)
    moved: dict[int, Node] = {}  # sum node's index -> its BatchNorm, to run just before it
    for bn, add, relu, k in _triples(rec.nodes, uses, rec):
        end = _ResidualEnd(bn.op, add.op, relu.op, k == 0)
        bn.ins = [*bn.ins, add.ins[1 - k]]
        bn.fn, bn.inplace = end.forward, []
        add.fn, add.inplace = end.sum_done, []
        relu.fn, relu.inplace = end.relu_done, []
        moved[add.index] = bn
        counts[BATCHNORM_ADD_RELU] += 1
    if moved:  # the residual may be computed after BatchNorm: the graph keeps recorded order
        rec.nodes = _moved_before(rec.nodes, moved)
    backs = _backwards(rec.nodes)
    for bn_fwd, relu_fwd in _pairs(rec.nodes, uses):
        bn_back, relu_back = backs.get(id(bn_fwd.op)), backs.get(id(relu_fwd.op))
        if not _backward_fits(bn_back, relu_back, uses):
            continue
        shared = _Rectified(bn_fwd.op)
        bn_fwd.fn = shared.forward
        relu_fwd.fn, relu_fwd.inplace = _pass_through, []
        if relu_back is not None and bn_back is not None:
            relu_back.fn, relu_back.inplace = _pass_through, []
            bn_back.fn, bn_back.inplace = shared.backward, []
        counts[BATCHNORM_RELU] += 1
    return counts
