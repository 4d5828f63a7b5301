"""Export of every autograd operator family (functional form), checked by onnxruntime
at two batch sizes; opset variants; losses of training graphs; export errors."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import warnings

import numpy as np
import pytest
from sonnx_helpers import check_export, op_types, rand, session

import singa.autograd as ag
from singa import autograd, layer, model, sonnx, tensor
from singa.autograd.conv_transpose import conv_transpose2d
from singa.autograd.engine import Operation
from singa.sonnx.registry import EXPORT as CONVERTERS
from singa.tensor import Tensor


def param(a, name=None):
    return Tensor(
        data=np.asarray(a), dtype=np.asarray(a).dtype, requires_grad=True, stores_grad=True, name=name
    )


def test_every_autograd_operator_has_a_converter():
    missing = []
    for info in pkgutil.iter_modules(ag.__path__):
        mod = importlib.import_module(f"singa.autograd.{info.name}")
        for name, cls in vars(mod).items():
            if (
                inspect.isclass(cls)
                and issubclass(cls, Operation)
                and cls is not Operation
                and cls.__module__ == mod.__name__
                and not name.startswith("_")
                and cls not in CONVERTERS
            ):
                missing.append(f"{mod.__name__}.{name}")
    assert not missing


ELEMENTWISE = [
    lambda x: autograd.add(x, 2.0),
    lambda x: autograd.sub(1.0, x),
    lambda x: autograd.mul(x, x),
    lambda x: autograd.div(x, autograd.add(autograd.abs(x), 1.0)),
    lambda x: autograd.pow(autograd.abs(x), 1.5),
    lambda x: autograd.neg(x),
    lambda x: autograd.exp(x),
    lambda x: autograd.log(autograd.add(autograd.abs(x), 0.5)),
    lambda x: autograd.sqrt(autograd.abs(x)),
    lambda x: autograd.sign(x),
    lambda x: autograd.clip(x, -0.5, 0.5),
    lambda x: autograd.clip(x, None, 0.3),
    lambda x: autograd.clip(x, -0.2),
    lambda x: autograd.maximum(x, autograd.neg(x)),
    lambda x: autograd.minimum(x, 0.1),
    lambda x: x * 3 + tensor.from_numpy(np.arange(4, dtype=np.int64)),  # mixed dtypes are cast
]


@pytest.mark.parametrize("fn", ELEMENTWISE)
def test_elementwise(fn):
    check_export(fn, lambda b: [rand((b, 4))])


ACTIVATIONS = [
    autograd.relu,
    lambda x: autograd.leakyrelu(x, 0.1),
    lambda x: autograd.elu(x, 0.7),
    autograd.selu,
    autograd.sigmoid,
    autograd.tanh,
    autograd.softplus,
    autograd.softsign,
    autograd.gelu,
    lambda x: autograd.gelu(x, "tanh"),
    lambda x: autograd.hardsigmoid(x, 0.3, 0.4),
    lambda x: autograd.softmax(x, axis=1),
    lambda x: autograd.softmax(x, axis=-1),
    lambda x: autograd.log_softmax(x, axis=1),
]


@pytest.mark.parametrize("opset", [11, 13, 17, 20])
@pytest.mark.parametrize("fn", ACTIVATIONS)
def test_activations_across_opsets(fn, opset):
    m = check_export(fn, lambda b: [rand((b, 3, 4))], opset=opset)
    assert m.opset_import[0].version == opset


def test_gelu_is_a_node_from_opset_20_and_a_formula_before():
    assert op_types(check_export(autograd.gelu, lambda b: [rand((b, 3))], opset=20)) == ["Gelu"]
    assert "Erf" in op_types(check_export(autograd.gelu, lambda b: [rand((b, 3))], opset=17))


W = param(rand((4, 3), seed=3), "W")
B = param(rand((3,), seed=4), "b")
B_COL = param(rand((5,), seed=5), "bcol")

LINALG = [
    lambda x: autograd.matmul(x, W),
    lambda x: autograd.add_bias(autograd.matmul(x, W), B, axis=0),
    lambda x: autograd.gemm(x, W, B, alpha=0.5, beta=2.0),
    lambda x: autograd.gemm(W, x, None, transA=True, transB=True),
]


@pytest.mark.parametrize("fn", LINALG)
def test_linalg(fn):
    m = check_export(fn, lambda b: [rand((b, 4))])
    for i in m.graph.initializer:
        assert i.name in {"W", "b"}


def test_batched_matmul_and_add_bias_columns():
    check_export(lambda x: autograd.matmul(x, autograd.transpose(x, (0, 2, 1))), lambda b: [rand((b, 3, 4))])
    check_export(
        lambda x: autograd.add_bias(x, B_COL, axis=1),
        lambda b: [rand((5, 2))],
        batches=(5,),
        dynamic_batch=False,
    )


def test_matmul_then_add_bias_is_one_gemm_where_it_can_be():
    """layer.Linear's matmul + add_bias is one Gemm (one layer for last_layers, as
    PyTorch's nn.Linear); not when the product is used elsewhere, is 3-D, or the bias
    is added along columns."""
    fused = check_export(
        lambda x: autograd.add_bias(autograd.matmul(x, W), B, axis=0), lambda b: [rand((b, 4))]
    )
    assert op_types(fused) == ["Gemm"]
    assert list(fused.graph.node[0].input) == ["input", "W", "b"]
    assert op_types(check_export(layer.Linear(3), lambda b: [rand((b, 4))])) == ["Gemm"]

    def twice(x):
        h = autograd.matmul(x, W)
        return autograd.add(autograd.add_bias(h, B, axis=0), h)

    assert op_types(check_export(twice, lambda b: [rand((b, 4))]))[:2] == ["MatMul", "Add"]
    assert op_types(check_export(layer.Linear(3), lambda b: [rand((b, 2, 4))])) == ["MatMul", "Add"]
    w_col = param(rand((4, 5), seed=6))
    cols = check_export(
        lambda x: autograd.add_bias(autograd.matmul(x, w_col), B_COL, axis=1),
        lambda b: [rand((5, 4))],
        batches=(5,),
        dynamic_batch=False,
    )
    assert "Gemm" not in op_types(cols)


SHAPE = [
    lambda x: autograd.reshape(x, (x.shape[0], -1)),
    lambda x: autograd.reshape(x, (x.shape[0] * 3, 4)),
    lambda x: autograd.flatten(x, 2),
    lambda x: autograd.transpose(x),
    lambda x: autograd.transpose(x, (0, 2, 1)),
    lambda x: autograd.cat([x, autograd.neg(x)], 1),
    lambda x: autograd.cat(list(autograd.split(x, 2, [1, 3])), 2),
    lambda x: autograd.split(x, 1, 3)[-1],
    lambda x: autograd.slice(x, [1, 0], [3, -1], [1, 2]),
    lambda x: autograd.slice(x, [-1], [0], [2], [-2]),
    lambda x: autograd.slice(x, [0], [x.shape[0]], [0]),
    lambda x: autograd.squeeze(autograd.unsqueeze(x, [1, -1])),
    lambda x: autograd.squeeze(autograd.unsqueeze(x, 1), 1),
    lambda x: autograd.pad(x, "constant", [0, 1, 2, 0, 0, 1], 0.5),
    lambda x: autograd.pad(x, "reflect", [0, 1, 2, 0, 1, 1]),
    lambda x: autograd.pad(x, "edge", [0, 0, 1, 0, 2, 0]),
    lambda x: autograd.expand(autograd.unsqueeze(x, 1), (x.shape[0], 2, 3, 4)),
    lambda x: autograd.gather(x, 2, [3, 0, 0]),
    lambda x: autograd.where(x, autograd.neg(x), tensor.from_numpy(np.array([True, False, True, True]))),
    lambda x: x[:, 1],
    lambda x: x[..., ::-1],
    lambda x: x[:, None, 1:, -1],
    lambda x: x[:, :, [2, 0]],
]


@pytest.mark.parametrize("fn", SHAPE)
def test_shape_operators(fn):
    check_export(fn, lambda b: [rand((b, 3, 4))])


REDUCTIONS = [
    lambda x: autograd.reduce_sum(x, [1]),
    lambda x: autograd.reduce_mean(x, [1, 2], keepdims=0),
    lambda x: autograd.reduce_max(x, [-1]),
    lambda x: autograd.sum(x, 2),
    lambda x: autograd.mean(x, (1, 2)),
    lambda x: autograd.cumsum(x, -1),
    lambda x: autograd.cumsum(x, 1, exclusive=True, reverse=True),
]


@pytest.mark.parametrize("opset", [11, 17, 18])
@pytest.mark.parametrize("fn", REDUCTIONS)
def test_reductions_across_opsets(fn, opset):
    check_export(fn, lambda b: [rand((b, 3, 4))], opset=opset)


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_opset_dependent_shape_forms(opset):
    def f(x):
        y = autograd.squeeze(autograd.unsqueeze(x, 0), 0)
        parts = autograd.split(y, 1, 3)
        return autograd.layer_norm(autograd.cat(list(parts), 1), SCALE, None)

    check_export(f, lambda b: [rand((b, 6))], opset=opset)


SCALE = param(rand((6,), seed=7), "scale")


def test_conv_transpose_variants():
    w = param(rand((3, 2, 3, 3), seed=10), "w")
    m = check_export(lambda x: conv_transpose2d(x, w, None, stride=2, padding=1, output_padding=1), img(3))
    assert op_types(m) == ["ConvTranspose"]
    wg = param(rand((4, 1, 2, 2), seed=11), "wg")
    check_export(lambda x: conv_transpose2d(x, wg, None, stride=(1, 2), dilation=2, groups=2), img(4))
    wb = param(rand((3, 4, 3, 3), seed=12), "wb")
    b = param(rand((4,), seed=9), "b")
    check_export(lambda x: conv_transpose2d(x, wb, b, stride=2, padding=(1, 0, 0, 1)), img(3))


def test_conv_functional_asymmetric_padding_groups_dilation():
    w = param(rand((4, 2, 3, 3), seed=15), "w")
    check_export(lambda x: autograd.conv2d(x, w, None, 2, (0, 1, 2, 0), 2, 2), img(4))


def img(c):
    return lambda n: [rand((n, c, 5, 6))]


# ----- training graphs (losses) -------------------------------------------------------------------
LW = param(rand((6, 4), seed=13), "fc.W")


def logits(x):
    return autograd.matmul(x, LW)


LOSSES = [
    ("sce-index", lambda x, t: autograd.softmax_cross_entropy(logits(x), t), "index"),
    ("sce-onehot", lambda x, t: autograd.softmax_cross_entropy(logits(x), t), "onehot"),
    ("ce-index", lambda x, t: autograd.cross_entropy(autograd.softmax(logits(x)), t), "index"),
    ("ce-onehot", lambda x, t: autograd.cross_entropy(autograd.softmax(logits(x)), t), "onehot"),
    ("nll", lambda x, t: autograd.nll_loss(autograd.log_softmax(logits(x), -1), t), "index"),
    ("mse", lambda x, t: autograd.mse_loss(logits(x), t), "onehot"),
    ("bce", lambda x, t: autograd.binary_cross_entropy(autograd.sigmoid(logits(x)), t), "onehot"),
]


@pytest.mark.parametrize("name,fn,labels", LOSSES, ids=[n for n, _, _ in LOSSES])
def test_loss_training_graphs(name, fn, labels):
    def make(b):
        idx = np.arange(b) % 4
        t = idx.astype(np.int32) if labels == "index" else np.eye(4, dtype=np.float32)[idx]
        return [rand((b, 6)), t]

    m = check_export(fn, make, tol=1e-5)
    assert [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim] == [1]


def test_index_labels_with_class_axis_last_on_3d_scores():
    w = param(rand((5, 3), seed=14), "w")
    check_export(
        lambda x, t: autograd.softmax_cross_entropy(autograd.matmul(x, w), t),
        lambda b: [rand((b, 2, 5)), (np.arange(2 * b).reshape(b, 2) % 3).astype(np.int64)],
    )


@pytest.mark.parametrize("name", ["softmax_cross_entropy", "cross_entropy", "nll_loss"])
def test_column_of_class_indices_exports(name):
    """(N, 1) class indices (SINGA's char-rnn labels) export with the column squeezed."""
    head = {"softmax_cross_entropy": logits, "cross_entropy": lambda x: autograd.softmax(logits(x))}
    head["nll_loss"] = lambda x: autograd.log_softmax(logits(x), -1)
    fn = getattr(autograd, name)
    check_export(
        lambda x, t: fn(head[name](x), t),
        lambda b: [rand((b, 6)), (np.arange(b) % 4).astype(np.int32).reshape(b, 1)],
        tol=1e-5,
    )


# ----- options and errors ----------------------------------------------------------------------------------
def test_static_batch_and_names():
    m = check_export(
        lambda a, c: autograd.add(a, c),
        lambda b: [rand((3, 2)), rand((3, 2), seed=2)],
        batches=(3,),
        dynamic_batch=False,
        input_names=["a", "c"],
        output_names=["sum"],
    )
    assert [i.name for i in m.graph.input] == ["a", "c"]
    assert m.graph.output[0].name == "sum"
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 3


def test_output_that_is_an_input_or_repeated():
    m = check_export(lambda x: (x, autograd.relu(x), autograd.relu(x)), lambda b: [rand((b, 2))])
    assert [o.name for o in m.graph.output] == ["output_0", "output_1", "output_2"]


def test_bad_opset():
    x = tensor.from_numpy(rand((2, 2)))
    with pytest.raises(ValueError, match="opset 9"):
        sonnx.to_onnx([x], autograd.relu, opset=9)


class Custom(Operation):
    def forward(self, x):
        return x * 2

    def backward(self, dy):
        return dy * 2


def test_unexportable_operator_names_it_and_its_layer():
    class Inner(layer.Layer):
        def forward(self, x):
            return Custom()(x)[0]

    class Net(model.Model):
        def __init__(self):
            super().__init__()
            self.block = Inner()

        def forward(self, x):
            return self.block(autograd.relu(x))

    with pytest.raises(sonnx.ExportError, match=r"Custom in layer block \(Inner\)"):
        sonnx.to_onnx([tensor.from_numpy(rand((2, 3)))], Net())


def test_batch_dependent_constant_is_reported():
    def f(x):
        return autograd.add(x, tensor.from_numpy(np.ones(x.shape, np.float32)))

    with pytest.raises(sonnx.ExportError, match="depends on the batch size"):
        sonnx.to_onnx([tensor.from_numpy(rand((2, 3)))], f, dynamic_batch=True)
    sonnx.to_onnx([tensor.from_numpy(rand((2, 3)))], f, dynamic_batch=False)


def test_batch_dependent_attribute_is_reported():
    def f(x):
        return autograd.gather(x, 0, list(range(x.shape[0])))

    with pytest.raises(sonnx.ExportError, match="Gather: input 1 is a constant that depends on the batch"):
        sonnx.to_onnx([tensor.from_numpy(rand((2, 3)))], f, dynamic_batch=True)

    def g(x):
        return autograd.split(x, 0, x.shape[0])[0]

    with pytest.raises(sonnx.ExportError, match="different operators at batch sizes 2 and 3"):
        sonnx.to_onnx([tensor.from_numpy(rand((2, 3)))], g, dynamic_batch=True)

    def h(x):
        y = autograd.matmul(x, autograd.transpose(x))
        return autograd.reshape(y, (1, 1, x.shape[0], x.shape[0]))

    with pytest.raises(sonnx.ExportError, match="several sizes that depend on the batch"):
        sonnx.to_onnx([tensor.from_numpy(rand((2, 3)))], h, dynamic_batch=True)


def test_default_falls_back_to_a_fixed_batch_with_a_warning():
    """SINGA's exporter always fixes the batch: by default a computation tied to the
    batch size is exported with a fixed one, and the warning says why."""

    def f(x):
        return autograd.reshape(x, (3, 2, 3))

    x = tensor.from_numpy(rand((3, 6)))
    with pytest.warns(UserWarning, match="does not run at batch size 4.*fixed at 3"):
        m = sonnx.to_onnx([x], f)
    assert [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim] == [3, 2, 3]
    assert [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim] == [3, 6]
    (got,) = session(m).run(None, {"input": x.to_numpy()})
    np.testing.assert_array_equal(got, x.to_numpy().reshape(3, 2, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a computation that follows the batch: dynamic, no warning
        m = sonnx.to_onnx([x], lambda x: autograd.relu(x))
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"


def test_fixed_batch_computation_says_to_export_a_static_batch():
    def f(x):
        return autograd.reshape(x, (3, 2, 3))

    x = tensor.from_numpy(rand((3, 6)))
    with pytest.raises(sonnx.ExportError, match="does not run at batch size 4.*dynamic_batch=False"):
        sonnx.to_onnx([x], f, dynamic_batch=True)
    m = sonnx.to_onnx([x], f, dynamic_batch=False)
    assert [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim] == [3, 2, 3]


def test_outputs_must_be_tensors_a_layer_or_a_function():
    x = tensor.from_numpy(rand((2, 3)))
    with pytest.raises(TypeError, match="output Tensor\\(s\\), the Layer/Model or the function"):
        sonnx.to_onnx([x], [np.ones(3)])
    # tensors (see test_export_tensors.py): from_numpy's input requires a gradient, as in
    # SINGA, so relu(x) is recorded and exports
    assert [n.op_type for n in sonnx.to_onnx([x], [autograd.relu(x)]).graph.node] == ["Relu"]


@pytest.mark.parametrize("opset", [11, 22])
def test_pooling_ceil_mode_grid(opset):
    """Ceil mode drops a last window that starts beyond the input and its begin padding
    (PyTorch's rule); older ONNX keeps it, so the exporter rewrites those cases."""
    import itertools

    for k, s, p, cip, h, w in itertools.product(
        (2, 3), (2, 3), (0, (1, 0, 0, 1)), (False, True), (5, 6), (5, 6)
    ):
        make = lambda b, h=h, w=w: [rand((b, 2, h, w))]  # noqa: E731
        avg = lambda x, k=k, s=s, p=p, c=cip: autograd.avg_pool_2d(x, k, s, p, True, c)  # noqa: E731
        check_export(avg, make, tol=1e-5, opset=opset)
        if cip:
            mx = lambda x, k=k, s=s, p=p: autograd.max_pool_2d(x, k, s, p, True)  # noqa: E731
            check_export(mx, make, tol=1e-5, opset=opset)


@pytest.mark.parametrize("labels", ["index", "onehot"])
def test_export_model_training_graph_with_loss(tmp_path, labels):
    from sonnx_helpers import session

    class Net(model.Model):
        def __init__(self):
            super().__init__()
            self.fc1 = layer.Linear(8)
            self.bn = layer.BatchNorm2d()
            self.fc2 = layer.Linear(3)

        def forward(self, x):
            return self.fc2(autograd.relu(self.bn(self.fc1(x))))

    def make(b):
        idx = np.arange(b) % 3
        return rand((b, 5)), (idx.astype(np.int64) if labels == "index" else np.eye(3, dtype=np.float32)[idx])

    net = Net()
    x, t = make(4)
    path = tmp_path / "train.onnx"
    m = sonnx.export_model(
        net, path, [tensor.from_numpy(x)], targets=[tensor.from_numpy(t)], loss=autograd.softmax_cross_entropy
    )
    assert {i.name for i in m.graph.initializer} == set(net.get_states())
    assert [o.name for o in m.graph.output] == ["output_0", "output_1"]
    sess = session(m)
    for b in (4, 7):
        x, t = make(b)
        out, loss = sess.run(None, {"input_0": x, "input_1": t})
        net.eval()
        with autograd.no_grad():
            want = net.forward(tensor.from_numpy(x))
            want_loss = autograd.softmax_cross_entropy(want, tensor.from_numpy(t))
        np.testing.assert_allclose(out, want.to_numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(loss, want_loss.to_numpy(), rtol=1e-5, atol=1e-6)
    assert sonnx.save(m, tmp_path / "copy.onnx") is m
    again = sonnx.save(net, tmp_path / "eval.onnx", [tensor.from_numpy(x)])
    assert [o.name for o in again.graph.output] == ["output"]
