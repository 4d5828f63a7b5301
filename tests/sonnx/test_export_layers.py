"""Export of every layer type: checked with onnx's full checker and run by onnxruntime at
two batch sizes (the traced one and another), compared with our eval output."""

from __future__ import annotations

import numpy as np
import pytest
from sonnx_helpers import check_export, op_types, rand

from singa import autograd, layer, model, sonnx, tensor


@pytest.fixture(autouse=True)
def seeded():
    from singa import device

    device.get_default_device().set_rand_seed(0)


def img(c=3, h=9, w=8):
    return lambda b: [rand((b, c, h, w))]


def test_linear_with_and_without_bias():
    m = check_export(layer.Linear(7), lambda b: [rand((b, 5))])
    assert {i.name for i in m.graph.initializer} == {"W", "b"}
    check_export(layer.Linear(4, bias=False), lambda b: [rand((b, 6))])


def test_gemm_layer():
    m = check_export(layer.Gemm(4, alpha=0.5, beta=2.0, transA=False, transB=True), lambda b: [rand((b, 6))])
    assert "Gemm" in op_types(m)


def test_embedding_with_integer_input():
    emb = layer.Embedding(10, 4)
    m = check_export(emb, lambda b: [np.arange(b * 3).reshape(b, 3).astype(np.int64) % 10])
    assert op_types(m) == ["Gather"]


def test_embedding_with_float_indices_casts_them():
    emb = layer.Embedding(10, 4)
    m = check_export(emb, lambda b: [(np.arange(b * 3).reshape(b, 3) % 10).astype(np.float32)])
    assert op_types(m) == ["Cast", "Gather"]


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(padding=(1, 0, 2, 1)),  # asymmetric (top, left, bottom, right)
        dict(stride=2, padding=1, group=3),
        dict(dilation=2, padding=2, bias=False),
        dict(stride=(2, 1), pad_mode="SAME_UPPER"),
        dict(padding=1, activation="RELU"),
    ],
)
def test_conv2d_variants(kwargs):
    m = check_export(layer.Conv2d(6, 3, **kwargs), img())
    assert "Conv" in op_types(m)


def test_depthwise_and_separable_conv():
    check_export(layer.Conv2d(3, 3, padding=1, group=3), img())
    check_export(layer.SeparableConv2d(5, 3, padding=1), img())


@pytest.mark.parametrize(
    "pool",
    [
        lambda: layer.MaxPool2d(3, 2, ceil_mode=True),
        lambda: layer.MaxPool2d(2, 2, padding=(1, 0, 0, 1)),
        lambda: layer.AvgPool2d(3, 2, padding=1, count_include_pad=False),
        lambda: layer.AvgPool2d(3, 2, padding=1, count_include_pad=True),
        lambda: layer.AvgPool2d(3, 2, ceil_mode=True),
        lambda: layer.GlobalAvgPool2d(),
    ],
)
def test_pooling_2d(pool):
    check_export(pool(), img(2, 9, 8))


def test_pooling_1d():
    check_export(layer.MaxPool1d(3, 2, padding=1), lambda b: [rand((b, 2, 11))])
    check_export(layer.AvgPool1d(2), lambda b: [rand((b, 2, 11))])


def test_batchnorm_exports_running_statistics():
    bn = layer.BatchNorm2d()
    x = tensor.from_numpy(rand((4, 3, 5, 5)))
    bn.train()
    for _ in range(3):  # move the running statistics away from 0 / 1
        bn(x)
    before = {n: t.to_numpy() for n, t in bn.get_states().items()}
    bn.train()
    m = check_export(bn, img(3, 5, 5))
    assert op_types(m) == ["BatchNormalization"]
    names = {i.name for i in m.graph.initializer}
    assert {"running_mean", "running_var", "scale", "bias"} <= names
    assert bn.training  # the mode is restored
    for n, t in bn.get_states().items():  # exporting changed nothing
        np.testing.assert_array_equal(t.to_numpy(), before[n])


def test_batchnorm_on_matrices_and_layernorm():
    check_export(layer.BatchNorm2d(), lambda b: [rand((b, 6))])
    check_export(layer.LayerNorm(), lambda b: [rand((b, 4, 6))])


def test_dropout_is_identity():
    class Net(model.Model):
        def __init__(self):
            super().__init__()
            self.fc = layer.Linear(4)
            self.drop = layer.Dropout(0.5)

        def forward(self, x):
            return self.drop(self.fc(x))

    m = check_export(Net(), lambda b: [rand((b, 6))])
    assert "Dropout" not in op_types(m)


@pytest.mark.parametrize(
    "make",
    [
        lambda: layer.ReLU(),
        lambda: layer.LeakyReLU(0.2),
        lambda: layer.Sigmoid(),
        lambda: layer.Tanh(),
        lambda: layer.SoftMax(),
        lambda: layer.Flatten(),
    ],
)
def test_simple_layers(make):
    check_export(make(), img(2, 3, 4))


def test_cat_add_reshape_layers():
    class Net(model.Model):
        def __init__(self):
            super().__init__()
            self.cat = layer.Cat(1)
            self.add = layer.Add()
            self.reshape = layer.Reshape((-1, 12))

        def forward(self, a, b):
            return self.reshape(self.add(self.cat([a, b]), self.cat([b, a])))

    check_export(Net(), lambda b: [rand((b, 2, 3)), rand((b, 2, 3), seed=1)])


@pytest.mark.parametrize("cls", [layer.RNN, layer.LSTM])
def test_recurrent_layers_batch_first(cls):
    class Net(model.Model):
        def __init__(self):
            super().__init__()
            self.rnn = cls(4, 5, num_layers=2, batch_first=True, bidirectional=True)

        def forward(self, x):
            return self.rnn(x)[0]

    check_export(Net(), lambda b: [rand((b, 3, 4))])


def test_recurrent_layer_time_major_fixed_batch():
    class Net(model.Model):
        def __init__(self):
            super().__init__()
            self.rnn = layer.LSTM(4, 5)

        def forward(self, x):
            return self.rnn(x)[0]

    check_export(Net(), lambda b: [rand((3, 2, 4))], batches=(2,), dynamic_batch=False)


def test_initializer_and_value_names():
    class Block(model.Model):
        def __init__(self):
            super().__init__()
            self.conv1 = layer.Conv2d(4, 3, padding=1)
            self.bn1 = layer.BatchNorm2d()
            self.fc = layer.Linear(2)

        def forward(self, x):
            y = autograd.relu(self.bn1(self.conv1(x)))
            return self.fc(autograd.flatten(y))

    net = Block()
    m = check_export(net, img(3, 4, 4))
    names = {i.name for i in m.graph.initializer}
    assert names == set(net.get_states())
    assert "conv1.W" in names and "bn1.running_var" in names
    assert [i.name for i in m.graph.input] == ["input"]
    assert [o.name for o in m.graph.output] == ["output"]
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert m.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert any(n.name.startswith("conv1/Conv") for n in m.graph.node)
    assert m.opset_import[0].version == sonnx.DEFAULT_OPSET == 17


def test_average_pooling_excludes_padding_by_default_in_export_and_import():
    """SINGA's kernels exclude padding; the file says so (count_include_pad absent or 0,
    ONNX's default) and importing it gives the same operator back."""
    proto = check_export(layer.AvgPool2d(3, 1, padding=1), img(2, 5, 5))
    node = next(n for n in proto.graph.node if n.op_type == "AveragePool")
    attrs = {a.name: a.i for a in node.attribute}
    assert attrs.get("count_include_pad", 0) == 0
    (y,) = sonnx.prepare(proto).run([np.ones((1, 2, 5, 5), np.float32)])
    np.testing.assert_allclose(np.asarray(y), 1.0, rtol=1e-6)  # padded cells not counted
