"""Tiny ONNX models of the families SINGA's ONNX examples run (ResNet, VGG, MobileNet,
ShuffleNet, SqueezeNet, DenseNet, Inception, BERT, GPT-2, ArcFace, Tiny-YOLO), written
with onnx.helper at the opsets the model-zoo files use (7-10). Each ends in class
scores (batch, CLASSES) so a SONNXModel subclass can fine-tune it."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

CLASSES = 4
IMAGE = (2, 3, 8, 8)
TOKENS = (2, 5)
VOCAB, HIDDEN, HEADS = 11, 8, 2


class Graph:
    """Nodes and initializers of a graph being written; names are numbered."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.count = 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}{self.count}"

    def param(self, shape, scale: float = 0.3, value=None) -> str:
        n = self.name("w")
        arr = value if value is not None else (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.inits.append(
            helper.make_tensor(n, helper.np_dtype_to_tensor_dtype(arr.dtype), arr.shape, arr.ravel())
        )
        return n

    def scalar(self, value: float) -> str:
        """A float constant as the exporters write it: a Constant node (not a weight)."""
        t = helper.make_tensor(self.name("c"), TensorProto.FLOAT, [], [value])
        return self.op("Constant", [], value=t)

    def ints(self, values) -> str:
        return self.param(None, value=np.asarray(values, np.int64))

    def op(self, op_type: str, inputs: list, n_out: int = 1, **attrs):
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=outs[0], **attrs))
        return outs[0] if n_out == 1 else outs

    # building blocks ------------------------------------------------------------------------
    def conv(self, x, cin, cout, k=3, stride=1, group=1, bias=True):
        ins = [x, self.param((cout, cin // group, k, k))] + ([self.param((cout,), 0.1)] if bias else [])
        return self.op("Conv", ins, kernel_shape=[k, k], pads=[k // 2] * 4, strides=[stride] * 2, group=group)

    def bn(self, x, c):
        scale = (1 + 0.1 * self.rng.standard_normal(c)).astype(np.float32)
        var = (1 + 0.1 * self.rng.random(c)).astype(np.float32)
        ins = [
            x,
            self.param(None, value=scale),
            self.param((c,), 0.1),
            self.param((c,), 0.1),
            self.param(None, value=var),
        ]
        return self.op("BatchNormalization", ins, epsilon=1e-5)

    def head(self, x, c):
        """GlobalAveragePool, Flatten, Gemm to CLASSES."""
        x = self.op("Flatten", [self.op("GlobalAveragePool", [x])], axis=1)
        return self.op("Gemm", [x, self.param((CLASSES, c)), self.param((CLASSES,), 0.1)], transB=1)

    def model(self, x_info, y: str, opset: int) -> onnx.ModelProto:
        out = helper.make_tensor_value_info(y, TensorProto.FLOAT, [IMAGE[0], CLASSES])
        g = helper.make_graph(self.nodes, "tiny", [x_info], [out], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=5)
        onnx.checker.check_model(m)
        return m


def _image_input():
    return helper.make_tensor_value_info("x", TensorProto.FLOAT, list(IMAGE))


def resnet():
    g = Graph(1)
    h = g.op("Relu", [g.bn(g.conv("x", 3, 4, bias=False), 4)])
    h = g.op("MaxPool", [h], kernel_shape=[2, 2], strides=[2, 2])
    r = g.op("Relu", [g.bn(g.conv(h, 4, 4, bias=False), 4)])
    r = g.bn(g.conv(r, 4, 4, bias=False), 4)
    h = g.op("Relu", [g.op("Add", [h, r])])
    return g.model(_image_input(), g.head(h, 4), 7)


def vgg():
    g = Graph(2)
    h = g.op("Relu", [g.conv("x", 3, 4)])
    h = g.op("MaxPool", [g.op("Relu", [g.conv(h, 4, 4)])], kernel_shape=[2, 2], strides=[2, 2])
    h = g.op("Flatten", [h], axis=1)
    h = g.op("Relu", [g.op("Gemm", [h, g.param((8, 64), 0.1), g.param((8,), 0.1)], transB=1)])
    h = g.op("Dropout", [h], ratio=0.5)
    return g.model(_image_input(), g.op("Gemm", [h, g.param((CLASSES, 8)), g.param((CLASSES,))], transB=1), 8)


def mobilenet():
    g = Graph(3)
    h = g.op("Clip", [g.bn(g.conv("x", 3, 6, bias=False), 6)], min=0.0, max=6.0)
    d = g.op("Clip", [g.bn(g.conv(h, 6, 6, group=6, bias=False), 6)], min=0.0, max=6.0)
    d = g.bn(g.conv(d, 6, 6, k=1, bias=False), 6)
    h = g.op("Add", [h, d])
    h = g.op("Reshape", [g.op("GlobalAveragePool", [h]), g.ints([0, -1])])
    return g.model(
        _image_input(), g.op("Gemm", [h, g.param((CLASSES, 6)), g.param((CLASSES,))], transB=1), 10
    )


def shufflenet():
    g = Graph(4)
    h = g.op("Relu", [g.bn(g.conv("x", 3, 4, group=1), 4)])
    h = g.op("Relu", [g.bn(g.conv(h, 4, 4, k=1, group=2), 4)])
    s = g.op("Reshape", [h, g.ints([2, 2, 2, 8, 8])])
    s = g.op("Reshape", [g.op("Transpose", [s], perm=[0, 2, 1, 3, 4]), g.ints([2, 4, 8, 8])])
    a = g.op("AveragePool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    b = g.bn(g.conv(s, 4, 4, stride=2, group=4), 4)
    h = g.op("Relu", [g.op("Concat", [a, b], axis=1)])
    return g.model(_image_input(), g.head(h, 8), 9)


def squeezenet():
    g = Graph(5)
    h = g.op("MaxPool", [g.op("Relu", [g.conv("x", 3, 4)])], kernel_shape=[3, 3], strides=[2, 2])
    s = g.op("Relu", [g.conv(h, 4, 2, k=1)])
    e = g.op("Concat", [g.op("Relu", [g.conv(s, 2, 4, k=1)]), g.op("Relu", [g.conv(s, 2, 4, k=3)])], axis=1)
    e = g.op("Dropout", [e], ratio=0.5)
    h = g.op("GlobalAveragePool", [g.op("Relu", [g.conv(e, 8, CLASSES, k=1)])])
    return g.model(_image_input(), g.op("Flatten", [h], axis=1), 7)


def densenet():
    g = Graph(6)
    h = g.conv("x", 3, 4, bias=False)
    for cin in (4, 6):
        n = g.conv(g.op("Relu", [g.bn(h, cin)]), cin, 2, bias=False)
        h = g.op("Concat", [h, n], axis=1)
    h = g.op(
        "AveragePool", [g.conv(g.op("Relu", [g.bn(h, 8)]), 8, 4, k=1)], kernel_shape=[2, 2], strides=[2, 2]
    )
    return g.model(_image_input(), g.head(h, 4), 9)


def inception():
    g = Graph(7)
    h = g.op("Relu", [g.conv("x", 3, 4)])
    b1 = g.op("Relu", [g.conv(h, 4, 2, k=1)])
    b2 = g.op("Relu", [g.conv(g.op("Relu", [g.conv(h, 4, 2, k=1)]), 2, 2, k=3)])
    b3 = g.op("Relu", [g.conv(g.op("Relu", [g.conv(h, 4, 2, k=1)]), 2, 2, k=5)])
    p = g.op("MaxPool", [h], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    b4 = g.op("Relu", [g.conv(p, 4, 2, k=1)])
    return g.model(_image_input(), g.head(g.op("Concat", [b1, b2, b3, b4], axis=1), 8), 8)


def arcface():
    g = Graph(8)
    h = g.bn(g.conv("x", 3, 4, bias=False), 4)
    h = g.op("PRelu", [h, g.param((4, 1, 1), 0.1)])
    h = g.op("Flatten", [g.op("MaxPool", [h], kernel_shape=[2, 2], strides=[2, 2])], axis=1)
    h = g.op("Gemm", [h, g.param((8, 64), 0.1), g.param((8,), 0.1)], transB=1)
    norm = g.op("Sqrt", [g.op("ReduceSum", [g.op("Mul", [h, h])], axes=[1], keepdims=1)])
    h = g.op("Div", [h, norm])
    return g.model(_image_input(), g.op("MatMul", [h, g.param((8, CLASSES))]), 8)


def tiny_yolo():
    g = Graph(9)
    h = g.op("LeakyRelu", [g.bn(g.conv("x", 3, 4, bias=False), 4)], alpha=0.1)
    h = g.op("MaxPool", [h], kernel_shape=[2, 2], strides=[2, 2])
    h = g.op("LeakyRelu", [g.bn(g.conv(h, 4, 8, bias=False), 8)], alpha=0.1)
    h = g.conv(h, 8, CLASSES, k=1)
    return g.model(_image_input(), g.op("Flatten", [g.op("GlobalAveragePool", [h])], axis=1), 8)


def _layer_norm(g: Graph, x: str) -> str:
    """LayerNormalization as the opset-10 exporters wrote it."""
    mu = g.op("ReduceMean", [x], axes=[-1], keepdims=1)
    d = g.op("Sub", [x, mu])
    var = g.op("ReduceMean", [g.op("Pow", [d, g.scalar(2.0)])], axes=[-1])
    den = g.op("Sqrt", [g.op("Add", [var, g.scalar(1e-5)])])
    return g.op(
        "Add", [g.op("Mul", [g.op("Div", [d, den]), g.param((HIDDEN,), 0.1)]), g.param((HIDDEN,), 0.1)]
    )


def _split_heads(g: Graph, x: str) -> str:
    b, s = TOKENS
    return g.op(
        "Transpose", [g.op("Reshape", [x, g.ints([b, s, HEADS, HIDDEN // HEADS])])], perm=[0, 2, 1, 3]
    )


def _transformer(g: Graph, causal: bool) -> str:
    b, s = TOKENS
    h = g.op("Gather", [g.param((VOCAB, HIDDEN), 0.5), "x"], axis=0)
    h = g.op("Add", [h, g.param((s, HIDDEN), 0.1)])
    x = _layer_norm(g, h) if causal else h
    q, k, v = (_split_heads(g, g.op("MatMul", [x, g.param((HIDDEN, HIDDEN))])) for _ in range(3))
    scores = g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])])
    scores = g.op("Div", [scores, g.scalar(2.0)])
    if causal:
        mask = np.triu(np.full((s, s), -1e4, np.float32), 1)
        scores = g.op("Add", [scores, g.param(None, value=mask)])
    att = g.op("MatMul", [g.op("Softmax", [scores], axis=3), v])
    att = g.op("Reshape", [g.op("Transpose", [att], perm=[0, 2, 1, 3]), g.ints([b, s, HIDDEN])])
    h = g.op("Add", [h, att]) if causal else _layer_norm(g, g.op("Add", [h, att]))
    f = g.op("MatMul", [h, g.param((HIDDEN, 2 * HIDDEN))])
    half = g.scalar(0.5)
    erf = g.op("Erf", [g.op("Div", [f, g.scalar(np.sqrt(2.0))])])
    f = g.op("Mul", [g.op("Mul", [f, half]), g.op("Add", [erf, g.scalar(1.0)])])
    h = g.op("Add", [h, g.op("MatMul", [f, g.param((2 * HIDDEN, HIDDEN))])])
    first = g.op("Slice", [h, g.ints([0]), g.ints([1]), g.ints([1])])
    pooled = g.op("Tanh", [g.op("Squeeze", [first], axes=[1])])
    return g.op("Gemm", [pooled, g.param((CLASSES, HIDDEN)), g.param((CLASSES,))], transB=1)


def bert():
    g = Graph(10)
    return g.model(
        helper.make_tensor_value_info("x", TensorProto.INT64, list(TOKENS)), _transformer(g, False), 10
    )


def gpt2():
    g = Graph(11)
    return g.model(
        helper.make_tensor_value_info("x", TensorProto.INT64, list(TOKENS)), _transformer(g, True), 10
    )


FAMILIES = {
    "resnet": resnet,
    "vgg": vgg,
    "mobilenet": mobilenet,
    "shufflenet": shufflenet,
    "squeezenet": squeezenet,
    "densenet": densenet,
    "inception": inception,
    "bert": bert,
    "gpt2": gpt2,
    "arcface": arcface,
    "tiny_yolo": tiny_yolo,
}


def inputs(model: onnx.ModelProto, seed: int = 0) -> np.ndarray:
    """A batch for ``model``: token ids or an image."""
    rng = np.random.default_rng(seed)
    if model.graph.input[0].type.tensor_type.elem_type == TensorProto.INT64:
        return rng.integers(0, VOCAB, TOKENS).astype(np.int64)
    return rng.standard_normal(IMAGE).astype(np.float32)
