"""The graphs inside control-flow nodes (If's branches, Loop's and Scan's bodies) as
runnable graphs: :class:`SubGraph`.

A subgraph may read values of the graphs around it (outer scope) by name; those
names become extra inputs of the runnable graph, fed from the enclosing graph's
values each time it runs. Subgraphs are built when the model is prepared, so an
unsupported operator inside a body is reported by ``prepare``, naming the node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import onnx
from onnx import helper

from singa.sonnx import values
from singa.sonnx.context import UnsupportedOperator


def graph_attributes(node: onnx.NodeProto) -> dict[str, onnx.GraphProto]:
    """The subgraph attributes of a node by name (``then_branch``, ``body`` ...)."""
    out = {}
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out[a.name] = a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            raise UnsupportedOperator(
                f"ONNX import: {node.op_type} node {node.name!r}: graph-list attribute {a.name!r}"
            )
    return out


def free_names(graph: onnx.GraphProto) -> list[str]:
    """Names the graph's nodes (and their subgraphs) read that the graph does not define."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer} | {""}
    free: list[str] = []
    for nd in graph.node:
        reads = list(nd.input)
        for g in graph_attributes(nd).values():
            reads += free_names(g)
        for n in reads:
            if n not in defined and n not in free:
                free.append(n)
        defined.update(nd.output)
    for v in graph.output:
        if v.name not in defined and v.name not in free:
            free.append(v.name)
    return free


def _tensor_input(v: onnx.ValueInfoProto, where: str) -> onnx.ValueInfoProto:
    """A body's input or output: its own declaration for a sequence or optional, else a
    tensor of any shape (bodies often leave element types and shapes out)."""
    if values.value_kind(v.type, f"{where}: value {v.name!r}") != "tensor":
        return v
    return helper.make_tensor_value_info(v.name, onnx.TensorProto.FLOAT, None)


class SubGraph:
    """A control-flow node's subgraph, ready to run.

    Args:
        graph: the ``onnx.GraphProto``.
        opset: the enclosing model's default-domain opset.
        device: where tensors live.
        make_graph: builds the runnable graph from a ModelProto and the device (the
            backend's ``OnnxGraph``).
        where: the node, for errors.
    """

    def __init__(self, graph: onnx.GraphProto, opset: int, device: Any, make_graph: Callable, where: str):
        self.input_names = [v.name for v in graph.input]
        self.output_names = [v.name for v in graph.output]
        self.free = free_names(graph)
        self.direct = not graph.node  # a body that only passes values through
        inputs = [_tensor_input(v, where) for v in graph.input]
        inputs += [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in self.free]
        outputs = [_tensor_input(v, where) for v in graph.output]
        if self.direct:
            self.graph = None
            return
        g = helper.make_graph(
            list(graph.node), graph.name or "subgraph", inputs, outputs, list(graph.initializer)
        )
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        try:
            self.graph = make_graph(model, device, where)
        except UnsupportedOperator as e:
            raise UnsupportedOperator(f"{where}: {e}") from e

    def run(self, inputs: Sequence[Any], scope: Mapping[str, Any], training: bool) -> list:
        """The subgraph's outputs for its formal ``inputs`` (in order) and the
        enclosing values ``scope`` (read by name)."""
        feeds = dict(zip(self.input_names, inputs))
        missing = [n for n in self.free if n not in scope and n not in feeds]
        if missing:
            raise ValueError(f"ONNX run: a subgraph reads {missing}, which no enclosing graph defines")
        for n in self.free:
            feeds.setdefault(n, scope[n])
        if self.direct:
            return [feeds[n] for n in self.output_names]
        return self.graph.run(feeds, {}, training=training)
