"""SONNXModel: an ONNX model as a trainable, checkpointable :class:`singa.model.Model`.

The graph's initializers become tensors of the model: those that feed differentiable
inputs are parameters (``stores_grad``), the others (BatchNorm running statistics,
integer constants, shapes, bounds) buffers. Constant nodes that feed BatchNorm running
statistics are buffers as well (named by the Constant's output), so a file that writes
them that way fine-tunes and checkpoints the same. They live in the dict attributes
``params`` and ``buffers`` under sanitised keys, so their state names are
``params.<key>`` / ``buffers.<key>``; ``onnx_names`` maps each key back to its ONNX
name. Forward evaluates the graph with autograd operators, so gradients flow to every
parameter; BatchNorm and Dropout follow ``train()`` / ``eval()``.

Example::

    m = sonnx.SONNXModel(onnx.load("model.onnx"))
    m.set_optimizer(opt.SGD(lr=0.01, momentum=0.9))
    m.train()
    out, loss = m(x, y)            # the default train_one_batch: softmax cross-entropy
    m.eval()
    (out,) = m(x)                  # forward returns the list of outputs
    m.save_states("finetuned.zip")

SINGA's subclass pattern works as it is: ``forward`` returns ``super().forward(*x)[0]``
(or ``super().forward(*x, last_layers=-3)[0]`` to cut the last layer off and put a new
head on), ``train_one_batch`` computes the loss and calls ``self.optimizer(loss)``.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import numpy as np

from singa import autograd
from singa.model.model import Model
from singa.sonnx import checks, replay, subgraph, values
from singa.sonnx.backend import OnnxGraph, _get_device
from singa.tensor import Tensor

# inputs that never receive a gradient: (op type, input index)
_STATIC_INPUTS = {
    "BatchNormalization": {3, 4},
    "Clip": {1, 2},
    "Pad": {1, 2, 3},
    "Reshape": {1},
    "Slice": {1, 2, 3, 4},
    "Squeeze": {1},
    "Unsqueeze": {1},
    "Expand": {1},
    "Split": {1},
    "ReduceSum": {1},
    "ReduceMean": {1},
    "ReduceMax": {1},
    "Dropout": {1, 2},
    "ConstantOfShape": {0},
    "Gather": {1},
    "Where": {0},
    "SoftmaxCrossEntropyLoss": {1, 2},
    "NegativeLogLikelihoodLoss": {1, 2},
    "Shape": {0},
    "Size": {0},
}


def _trainable(graph: OnnxGraph) -> set[str]:
    """Floating initializers that feed at least one differentiable input."""
    out = set()
    for nd in graph.model.graph.node:
        static = _STATIC_INPUTS.get(nd.op_type, set())
        for i, name in enumerate(nd.input):
            if name in graph.initializers and i not in static:
                out.add(name)
        for body in subgraph.graph_attributes(nd).values():  # read inside If/Loop/Scan bodies
            out.update(n for n in subgraph.free_names(body) if n in graph.initializers)
    return {n for n in out if graph.initializers[n].dtype.kind == "f"}


def _sanitize(name: str, taken: set[str]) -> str:
    key = re.sub(r"[^A-Za-z0-9_.]", "_", name).strip(".") or "w"
    key = re.sub(r"\.{2,}", ".", key)
    base, k = key, 1
    while key in taken:
        key = f"{base}_{k}"
        k += 1
    taken.add(key)
    return key


class SONNXModel(Model):
    """A :class:`~singa.model.Model` running an ONNX graph (SINGA's ``SONNXModel``).

    Args:
        onnx_model: an ``onnx.ModelProto``, a path or serialized bytes.
        device: where the parameters live (a Device, "CPU"/"CUDA", or None for the CPU).

    Attributes:
        params: trainable initializers, ``{key: Tensor}``.
        buffers: the other initializers, and the Constant nodes feeding BatchNorm
            running statistics, ``{key: Tensor}``.
        onnx_names: ``{key: ONNX initializer name (or Constant output name)}`` for both.
        input_names / output_names: the graph's inputs (initializers excluded) and outputs.
    """

    def __init__(self, onnx_model: Any, device: Any = None, name: str | None = None):
        super().__init__(name)
        dev = _get_device(device)
        proto, source = checks.load(onnx_model)
        self._graph = OnnxGraph(proto, dev, source)
        self._device = dev
        self.input_names = list(self._graph.input_names)
        self.output_names = list(self._graph.output_names)
        trainable = _trainable(self._graph)
        self.params: dict[str, Tensor] = {}
        self.buffers: dict[str, Tensor] = {}
        self.onnx_names: dict[str, str] = {}
        self._by_onnx: dict[str, Tensor] = {}
        taken: set[str] = set()
        for oname, arr in self._graph.initializers.items():
            key = _sanitize(oname, taken)
            data = arr if dev.xp is np else dev.xp.asarray(arr)
            if oname in trainable:
                t = Tensor(arr.shape, dev, arr.dtype, data=data, requires_grad=True, stores_grad=True)
                self.params[key] = t
            else:
                t = Tensor(arr.shape, dev, arr.dtype, data=data, requires_grad=False)
                self.buffers[key] = t
            self.onnx_names[key] = oname
            self._by_onnx[oname] = t
        for oname, arr in self._graph.state_constants.items():  # BatchNorm statistics from Constants
            key = _sanitize(oname, taken)
            data = arr if dev.xp is np else dev.xp.asarray(arr)
            t = Tensor(arr.shape, dev, arr.dtype, data=data, requires_grad=False)
            self.buffers[key] = t
            self.onnx_names[key] = oname
            self._by_onnx[oname] = t
        self.ensure_initialized()  # every parameter exists: nothing waits for a first call

    def graph(self, mode: bool = True, sequential: bool = False, fold_batchnorm: bool | None = None) -> None:
        """See :meth:`singa.model.Model.graph`. A trace freezes values computed outside
        the recorded operators, so graph mode stays off (with a warning) for a graph
        that :func:`singa.sonnx.replay.replayable` does not accept, counting only its
        integer initializers as unchanging (parameters and statistics change as it
        trains): its calls run eagerly, with the same results."""
        if mode:
            fixed = [n for n, a in self._graph.initializers.items() if a.dtype.kind != "f"]
            if not replay.replayable(self._graph.model, fixed):
                warnings.warn(
                    "SONNXModel: graph mode stays off: this graph computes values that a trace "
                    "would freeze (see singa.sonnx.replay); calls run eagerly",
                    RuntimeWarning,
                    stacklevel=2,
                )
                mode = False
        super().graph(mode, sequential, fold_batchnorm)

    @property
    def onnx_model(self) -> Any:
        """The imported ``onnx.ModelProto`` (its initializers hold the imported values)."""
        return self._graph.model

    def forward(self, *inputs: Any, last_layers: int | None = None, aux_output: tuple = ()) -> list:
        """Evaluate the graph on ``inputs`` (Tensors or arrays, in the order of
        ``input_names``); returns the LIST of output Tensors (SINGA's API: a
        subclass's forward returns ``super().forward(*x)[0]``).

        Args:
            last_layers: run the model up to a layer (transfer learning), SINGA's
                rule: the index of the last layer run, layers being the nodes other
                than Constant; a negative index counts as ``k + 1 + n``, so ``-3``
                drops the last layer (``-1`` and ``-2`` run them all). The outputs of
                the last layer run are returned in place of the graph outputs. None
                runs everything.
            aux_output: names of intermediate ONNX values to return as well (appended).
        """
        if len(inputs) != len(self.input_names):
            raise ValueError(
                f"SONNXModel: {len(inputs)} inputs given, the graph takes {len(self.input_names)} "
                f"({', '.join(self.input_names)})"
            )
        types = self._graph.input_types
        feeds = {
            n: x if isinstance(x, Tensor) else values.feed(x, types.get(n), self._device, n)
            for n, x in zip(self.input_names, inputs)
        }
        stop = self._graph.cut(last_layers)
        outs = self._graph.run(
            feeds, self._by_onnx, training=self.training, extra=tuple(aux_output), stop=stop
        )
        return [values.to_user(o, True) for o in outs]  # a sequence output: a list of Tensors

    def train_one_batch(self, x: Tensor, y: Tensor) -> tuple:
        """The default training step: softmax cross-entropy of the (first) output
        against ``y`` (class indices or one-hot), then ``self.optimizer(loss)``.
        Returns ``(out, loss)``. Override for other losses."""
        out = self.forward(x)
        if isinstance(out, list | tuple):  # a subclass's forward may return one Tensor
            out = out[0]
        loss = autograd.softmax_cross_entropy(out, y)
        if self.optimizer is None:
            raise RuntimeError("SONNXModel.train_one_batch: set an optimizer first (set_optimizer)")
        self.optimizer(loss)
        return out, loss

    def __repr__(self) -> str:
        return (
            f"SONNXModel(inputs={self.input_names}, outputs={self.output_names}, params={len(self.params)})"
        )
