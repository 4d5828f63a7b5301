"""Training-graph fusion: a BatchNorm whose only user is a ReLU, in one pass each way.

A convolutional network's blocks end in BatchNorm then ReLU. Run in turn, the two
operators make a pass over the activations for the ReLU alone in each direction: the
forward rewrites BatchNorm's output in place, the backward gates the gradient
(``dy * (y > 0)``) in place before BatchNorm's two backward passes read it. Here the
BatchNorm node computes ``max(normalised, 0)`` directly
(:meth:`~singa.autograd.normalization.BatchNorm2d.forward_relu`), the ReLU nodes pass
their array through, and BatchNorm's backward applies the gate inside its own passes
(:meth:`~singa.autograd.normalization.BatchNorm2d.backward_gated`). Per element the
same arithmetic runs, so the replay keeps the bits of eager execution.

:func:`fuse` rewrites the nodes of a traced training call (CPU, float32 parameters)
before :class:`~singa.model.graph.Graph` schedules them; the operators keep their
caches as the engine expects.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from singa.autograd.activation import ReLU
from singa.autograd.normalization import BatchNorm2d
from singa.model.graph import Node, Recorder

__all__ = ["fuse", "BATCHNORM_RELU"]

#: the name :func:`fuse` counts its rewrites under
BATCHNORM_RELU = "batchnorm+relu"


class _Rectified:
    """The array a fused BatchNorm node produced, shared by the three rewritten nodes
    from the forward until BatchNorm's backward has read it."""

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


def _pass_through(a: Any) -> Any:
    """The ReLU nodes' work once fused: the array is rectified (forward) or will be
    gated by BatchNorm's backward (backward) already."""
    return a


def _backwards(nodes: list[Node]) -> dict[int, Node]:
    """Backward node of each operator, by the operator's id."""
    return {id(n.op): n for n in nodes if n.is_backward and n.op is not None}


def _uses(nodes: list[Node], out_slots: list[int]) -> Counter:
    return Counter(s for n in nodes for s in n.ins if s is not None) + Counter(out_slots)


def _pairs(nodes: list[Node], uses: Counter) -> list[tuple[Node, Node]]:
    """(BatchNorm forward, ReLU forward) node pairs where the ReLU is the BatchNorm
    output's one user."""
    producer = {s: n for n in nodes if not n.is_backward for s in n.outs if s is not None}
    pairs = []
    for n in nodes:
        if n.is_backward or type(n.op) is not ReLU or not n.ins or uses[n.ins[0]] != 1:
            continue
        src = producer.get(n.ins[0])
        if src is not None and type(src.op) is BatchNorm2d and src.outs[0] == n.ins[0]:
            pairs.append((src, n))
    return pairs


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
    """Rewrite ``rec.nodes`` of a traced training call on the CPU: each BatchNorm whose
    only user is a ReLU computes both, forward and backward, as the module docstring
    says. Returns how many pairs were fused (``Counter({"batchnorm+relu": n})``)."""
    counts: Counter = Counter()
    if rec.dev.is_gpu:
        return counts
    uses = _uses(rec.nodes, out_slots)
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
