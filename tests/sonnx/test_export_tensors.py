"""SINGA's export form ``sonnx.to_onnx(inputs, [y])`` with output tensors already computed
under ``autograd.training = True``: the recorded graph is walked back and replayed in
inference form; each file passes the full checker and runs in onnxruntime at two batch
sizes against our eval output; the user's graph stays usable for backward."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from sonnx_helpers import op_types, rand, reference, session

from singa import autograd, device, layer, model, opt, sonnx, tensor


@pytest.fixture(autouse=True)
def recording():
    device.get_default_device().set_rand_seed(0)
    prev = autograd.training
    autograd.training = True
    yield
    autograd.training = prev


class MLP(model.Model):
    def __init__(self):
        super().__init__()
        self.fc1 = layer.Linear(16)
        self.fc2 = layer.Linear(4)

    def forward(self, x):
        return self.fc2(autograd.relu(self.fc1(x)))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


class CNN(model.Model):
    """Conv + BatchNorm + pooling + Dropout + Linear."""

    def __init__(self):
        super().__init__()
        self.conv = layer.Conv2d(4, 3, padding=1)
        self.bn = layer.BatchNorm2d()
        self.pool = layer.MaxPool2d(2, 2)
        self.drop = layer.Dropout(0.4)
        self.fc = layer.Linear(3)

    def forward(self, x):
        y = self.pool(autograd.relu(self.bn(self.conv(x))))
        return self.fc(self.drop(autograd.flatten(y)))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def vectors(b):
    return [rand((b, 8), seed=b)]


def images(b):
    return [rand((b, 2, 6, 6), seed=b)]


def check_runs(proto, target, make, batches=(3, 5), tol=1e-4):
    """Full check, then onnxruntime at every batch size against ``target``'s eval output."""
    onnx.checker.check_model(proto, full_check=True)
    sess = session(proto)
    names = [i.name for i in sess.get_inputs()]
    for b in batches:
        arrays = make(b)
        want = reference(target, arrays)
        got = sess.run(None, dict(zip(names, arrays)))
        assert len(got) == len(want)
        for w, g in zip(want, got):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol * max(1.0, float(np.abs(w).max())))


def test_mlp_in_singa_form():
    m = MLP()
    x = tensor.from_numpy(vectors(3)[0])
    y = m.forward(x)
    proto = sonnx.to_onnx([x], [y])
    assert op_types(proto) == ["Gemm", "Relu", "Gemm"]  # Linear: matmul + add_bias -> one Gemm
    # the parameters carry their dotted names (Tensor.name, as in SINGA)
    assert sorted(i.name for i in proto.graph.initializer) == ["fc1.W", "fc1.b", "fc2.W", "fc2.b"]
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    check_runs(proto, m, vectors)
    # a single Tensor works too, and model= names the initializers by their dotted names
    named = sonnx.to_onnx(x, y, model=m, input_names=["x"], output_names=["logits"])
    assert {i.name for i in named.graph.initializer} == set(m.get_states())
    assert [o.name for o in named.graph.output] == ["logits"]
    check_runs(named, m, vectors)


def test_operator_arguments_among_the_inputs_are_left_out_as_in_singa():
    x = tensor.from_numpy(np.array([[-0.9, -0.3], [0.1, 0.5], [0.9, 0.2]], np.float32))
    y = autograd.clip(x, -0.5, 0.5)
    proto = sonnx.to_onnx([x, -0.5, 0.5], [y])  # SINGA's tests pass min and max this way
    assert [i.name for i in proto.graph.input] == ["input"]
    (got,) = session(proto).run(None, {"input": x.to_numpy()})
    np.testing.assert_array_equal(got, np.clip(x.to_numpy(), -0.5, 0.5))
    sonnx.to_onnx([x, (2, 3), [1, 2]], [y])  # shapes too
    for bad in (np.float32(0.5), "x", True, [0.5, "a"]):
        with pytest.raises(TypeError, match="inputs must be Tensors"):
            sonnx.to_onnx([x, bad], [y])


def test_input_that_requires_grad_as_in_singa():
    """SINGA's ``tensor.Tensor(shape)`` requires a gradient by default: still a graph input."""
    m = MLP()
    x = tensor.Tensor((3, 8))
    x.copy_from_numpy(vectors(3)[0])
    assert x.requires_grad and not x.stores_grad
    proto = sonnx.to_onnx([x], [m.forward(x)], model=m)
    check_runs(proto, m, vectors)


def test_cnn_with_batchnorm_and_dropout_exports_inference_form():
    net = CNN()
    net.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    x = tensor.from_numpy(images(4)[0])
    t = tensor.from_numpy((np.arange(4) % 3).astype(np.int64))
    net.train()
    net(x, t)  # one training step: running statistics move away from 0 / 1
    rm = net.bn.running_mean.to_numpy()
    assert not np.allclose(rm, 0)
    y = net.forward(x)  # training mode: batch statistics, a dropout mask
    states = {k: v.to_numpy() for k, v in net.get_states().items()}
    proto = sonnx.to_onnx([x], [y], model=net)
    for k, v in net.get_states().items():  # no state touched by the export
        np.testing.assert_array_equal(v.to_numpy(), states[k])
    assert net.training
    types = op_types(proto)
    assert "BatchNormalization" in types and "Dropout" not in types
    bn = next(n for n in proto.graph.node if n.op_type == "BatchNormalization")
    assert all(a.name != "training_mode" for a in bn.attribute)
    assert {i.name for i in proto.graph.initializer} == set(net.get_states())
    check_runs(proto, net, images, batches=(4, 7))
    # without model=: the running statistics (4 channels, batch 4) are named initializers
    # too, and a re-import makes them buffers (trained in place, checkpointed)
    plain = sonnx.to_onnx([x], [y])
    names = [i.name for i in plain.graph.initializer]
    assert len(names) == 8 and "Constant" not in op_types(plain)
    assert list(bn.input[3:]) == ["bn.running_mean", "bn.running_var"]
    assert list(next(n for n in plain.graph.node if n.op_type == "BatchNormalization").input[3:]) == [
        "bn.running_mean",  # Tensor.name, as in SINGA
        "bn.running_var",
    ]
    check_runs(plain, net, images, batches=(4, 7))
    imported = sonnx.SONNXModel(plain)
    assert set(imported.buffers) == {"bn.running_mean", "bn.running_var"}
    np.testing.assert_array_equal(
        imported.buffers["bn.running_mean"].to_numpy(), net.bn.running_mean.to_numpy()
    )


def test_backward_after_export_gives_the_same_gradients():
    net = CNN()
    x = tensor.from_numpy(images(4)[0])
    t = tensor.from_numpy((np.arange(4) % 3).astype(np.int64))
    net.train()
    net.forward(x)  # create the parameters
    grads = []
    for export in (False, True):
        device.get_default_device().set_rand_seed(7)  # the same dropout mask both times
        y = net.forward(x)
        loss = autograd.softmax_cross_entropy(y, t)
        if export:
            sonnx.to_onnx([x], [y], model=net)
        g = autograd.gradients(loss)
        grads.append({n: g[p].to_numpy() for n, p in net.get_params().items()})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) == 6
    for k in grads[0]:
        np.testing.assert_array_equal(grads[1][k], grads[0][k])


class WithConstant(model.Model):
    """Constants made in forward: a row of weights and a scalar."""

    def __init__(self):
        super().__init__()
        self.fc = layer.Linear(5)

    def forward(self, x):
        w = tensor.from_numpy(np.linspace(0.5, 1.5, 5).astype(np.float32).reshape(1, 5))
        h = autograd.mul(self.fc(x), w)
        return autograd.add(autograd.tanh(h), tensor.from_numpy(np.array([0.25], np.float32)))


def test_constants_made_in_forward():
    m = WithConstant()
    x = tensor.from_numpy(vectors(3)[0])
    proto = sonnx.to_onnx([x], [m.forward(x)], model=m)
    assert op_types(proto).count("Constant") == 2
    assert {i.name for i in proto.graph.initializer} == {"fc.W", "fc.b"}
    check_runs(proto, m, vectors)


class TwoHeads(model.Model):
    def __init__(self):
        super().__init__()
        self.fc1 = layer.Linear(6)
        self.fc2 = layer.Linear(3)
        self.fc3 = layer.Linear(2)

    def forward(self, x, z):
        h = autograd.relu(self.fc1(x))
        return self.fc2(h), autograd.add(self.fc3(h), z), h


def test_several_inputs_and_outputs():
    m = TwoHeads()
    x = tensor.from_numpy(vectors(3)[0])
    z = tensor.from_numpy(rand((3, 2), seed=9))
    a, b, h = m.forward(x, z)
    proto = sonnx.to_onnx([x, z], [a, b, h, a], model=m)
    assert [i.name for i in proto.graph.input] == ["input_0", "input_1"]
    assert [o.name for o in proto.graph.output] == ["output_0", "output_1", "output_2", "output_3"]

    def make(n):
        return [vectors(n)[0], rand((n, 2), seed=n + 1)]

    sess = session(proto)
    for n in (3, 6):
        arrays = make(n)
        want = reference(m, arrays)
        got = sess.run(None, {"input_0": arrays[0], "input_1": arrays[1]})
        for w, g in zip(want + want[:1], got, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_outputs_computed_in_evaluation_mode_export_and_unrecorded_ones_are_an_error():
    """As in SINGA, operators record their graph whatever autograd.training says (only
    the backward caches depend on it)."""
    m = MLP()
    x = tensor.from_numpy(vectors(3)[0])
    autograd.training = False
    y = m.forward(x)
    check_runs(sonnx.to_onnx([x], [y]), m, vectors)
    assert [n.op_type for n in sonnx.to_onnx([x], [autograd.relu(x)]).graph.node] == ["Relu"]
    with autograd.no_grad():
        y = m.forward(x)
    with pytest.raises(sonnx.ExportError, match=r"no recorded graph.*pass the model"):
        sonnx.to_onnx([x], [y])
    autograd.training = True
    y = m.forward(x)
    other = tensor.from_numpy(vectors(3)[0])
    with pytest.raises(sonnx.ExportError, match="do not depend on the inputs"):
        sonnx.to_onnx([other], [y])


def test_graph_released_or_parameters_changed_is_a_clear_error():
    m = MLP()
    m.set_optimizer(opt.SGD(lr=0.1))
    x = tensor.from_numpy(vectors(3)[0])
    y = m.forward(x)
    autograd.gradients(autograd.sum(y))  # keeps the graph, as SINGA's backward does
    assert len(sonnx.to_onnx([x], [y]).graph.node) > 0
    autograd.gradients(autograd.sum(y), retain_graph=False)
    with pytest.raises(sonnx.ExportError, match="released.*export before calling backward"):
        sonnx.to_onnx([x], [y])
    t = tensor.from_numpy(np.arange(3, dtype=np.int64) % 4)
    m.train()
    out, _ = m(x, t)  # a training step: backward released the graph of `out`
    with pytest.raises(sonnx.ExportError, match=r"released.*compute the outputs again"):
        sonnx.to_onnx([x], [out])
    y = m.forward(x)
    m.fc2.W.data += 0.5  # the parameters change after `y` was computed
    with pytest.warns(UserWarning, match="does not reproduce output 0.*parameter changed"):
        proto = sonnx.to_onnx([x], [y])  # SINGA's form: export after a step holds the new values
    exported = {i.name: onnx.numpy_helper.to_array(i) for i in proto.graph.initializer}
    assert any(a.shape == m.fc2.W.shape and np.array_equal(a, m.fc2.W.to_numpy()) for a in exported.values())


class Flat(model.Model):
    def __init__(self, scale=None):
        super().__init__()
        self.scale = scale
        self.fc = layer.Linear(3)

    def forward(self, x):
        h = autograd.reshape(x, (x.shape[0], -1))
        return self.fc(h if self.scale is None else autograd.mul(h, self.scale))


def test_operators_on_the_inputs_are_recorded_whatever_requires_grad_says():
    """As in SINGA, operators run on the inputs before they meet a parameter are recorded
    (an input that requires no gradient included), so they are part of the file."""
    scaled = Flat(scale=0.5)
    for requires_grad in (True, False):
        x = tensor.from_numpy(images(4)[0])
        x.requires_grad = requires_grad
        proto = sonnx.to_onnx([x], [scaled.forward(x)], dynamic_batch=False)
        assert "Mul" in op_types(proto) and "Reshape" in op_types(proto)
        check_runs(proto, scaled, images, batches=(4,))


def test_batch_dependent_recording_needs_a_fixed_batch():
    m = Flat()
    x = tensor.from_numpy(images(4)[0])
    x.requires_grad = True
    y = m.forward(x)  # recorded, with the target shape (4, -1)
    with pytest.raises(
        sonnx.ExportError, match=r"MatMul failed.*at batch size 5 \(recorded at 4\).*dynamic_batch"
    ):
        sonnx.to_onnx([x], [y], dynamic_batch=True)
    proto = sonnx.to_onnx([x], [y], dynamic_batch=False)
    check_runs(proto, m, images, batches=(4,))


def test_batch_sized_constant_is_named_when_the_batch_changes():
    m = MLP()
    x = tensor.from_numpy(vectors(3)[0])
    noise = tensor.from_numpy(rand((3, 4), seed=5))
    y = autograd.add(m.forward(x), noise)
    with pytest.raises(
        sonnx.ExportError, match=r"shape \(3, 4\) whose axis 0 is the batch size 3.*among the inputs"
    ):
        sonnx.to_onnx([x], [y], dynamic_batch=True)
    sonnx.to_onnx([x], [y], dynamic_batch=False)  # the noise is a constant of the file
    t = tensor.from_numpy((np.arange(3) % 4).astype(np.int64))
    loss = autograd.softmax_cross_entropy(y, t)  # labels: per-example data, no size mismatch to notice
    with pytest.raises(sonnx.ExportError, match=r"shape \(3,\) whose axis 0 is the batch size"):
        sonnx.to_onnx([x, noise], [loss], dynamic_batch=True)
    proto = sonnx.to_onnx([x, noise, t], [y, loss], model=m)
    assert [n.op_type for n in proto.graph.node].count("SoftmaxCrossEntropyLoss") == 1
    proto = sonnx.to_onnx([x, noise], [y])
    sess = session(proto)
    a, n = vectors(6)[0], rand((6, 4), seed=6)
    m.eval()
    with autograd.no_grad():
        want = autograd.add(m.forward(tensor.from_numpy(a)), tensor.from_numpy(n)).to_numpy()
    np.testing.assert_allclose(sess.run(None, {"input_0": a, "input_1": n})[0], want, rtol=1e-5, atol=1e-6)


def test_tensors_recorded_from_a_function_without_a_model():
    w = tensor.Tensor((4, 3), requires_grad=True, stores_grad=True)
    w.copy_from_numpy(rand((4, 3), seed=3))
    w.name = "weight"
    x = tensor.from_numpy(rand((2, 4)))
    y = autograd.softmax(autograd.matmul(x, w))
    proto = sonnx.to_onnx([x], [y])
    assert [i.name for i in proto.graph.initializer] == ["weight"]
    sess = session(proto)
    a = rand((5, 4), seed=4)
    want = np.exp(a @ w.to_numpy())
    np.testing.assert_allclose(sess.run(None, {"input": a})[0], want / want.sum(1, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize("name,channels,size", [("mlp", 1, 28), ("cnn", 1, 28), ("resnet8", 3, 32)])
def test_zoo_models_in_singa_form(name, channels, size):
    from singa import zoo

    m = zoo.create(name, num_classes=10, num_channels=channels, image_size=size)
    x = tensor.from_numpy(rand((2, channels, size, size)))
    m.compile([x], is_train=True)
    m.train()
    y = m.forward(x)
    proto = sonnx.to_onnx([x], [y], model=m)
    assert {i.name for i in proto.graph.initializer} == set(m.get_states())
    check_runs(proto, m, lambda b: [rand((b, channels, size, size), seed=b)], batches=(2, 5))


@pytest.mark.gpu
def test_singa_form_on_gpu():
    """Recorded on a CUDA device (cupy arrays): exported like on the CPU."""
    pytest.importorskip("cupy")
    if device.get_num_gpus() == 0:
        pytest.skip("no CUDA GPU visible to cupy")
    gpu = device.create_cuda_gpu()
    for net, make in ((CNN(), images), (Flat(), images)):
        net.forward(tensor.from_numpy(make(4)[0]))  # create the parameters
        for t in net.get_states().values():
            t.to_device(gpu)
        net.train()
        x = tensor.from_numpy(make(4)[0], gpu)
        proto = sonnx.to_onnx([x], [net.forward(x)], model=net)
        sess = session(proto)
        net.eval()
        for b in (4, 7):
            a = make(b)[0]
            with autograd.no_grad():
                want = net.forward(tensor.from_numpy(a, gpu)).to_numpy()
            np.testing.assert_allclose(sess.run(None, {"input": a})[0], want, rtol=1e-4, atol=1e-4)


def test_naming_in_singa_form_as_documented():
    """docs/onnx.md, Naming: model= gives the dotted names of the initializers; nodes carry
    layer paths only when a layer ran under the tracer (the model, or a function with
    model=), not in SINGA's form, whose recording does not say which layer ran an op."""
    net = CNN()
    x = tensor.from_numpy(images(4)[0])
    y = net.forward(x)
    named = sonnx.to_onnx([x], [y], model=net)
    assert {i.name for i in named.graph.initializer} == set(net.get_states())
    assert all("/" not in n.name for n in named.graph.node)
    plain = sonnx.to_onnx([x], [y])
    inits = [i.name for i in plain.graph.initializer]
    assert sorted(inits) == sorted(net.get_states())  # the tensors carry their dotted names
    traced = sonnx.to_onnx([x], net)
    conv = next(n for n in traced.graph.node if n.op_type == "Conv")
    assert conv.name.startswith("conv/")
    fn = sonnx.to_onnx([x], lambda a: autograd.softmax(net.forward(a)), model=net)
    assert next(n for n in fn.graph.node if n.op_type == "Conv").name.startswith("conv/")


class FirstOutput(model.Model):
    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, x):
        return self.rnn(x)[0]


@pytest.mark.parametrize(
    "make_rnn",
    [
        lambda: layer.LSTM(4, 5, batch_first=True),
        lambda: layer.RNN(4, 5, num_layers=2, batch_first=True, bidirectional=True),
    ],
    ids=["lstm", "rnn-2-layers-bidirectional"],
)
def test_recurrent_layers_with_a_dynamic_batch(make_rnn):
    """The recurrence records no batch-sized reshape target (layer/rnn.py uses -1)."""
    m = FirstOutput(make_rnn())

    def seqs(b):
        return [rand((b, 6, 4), seed=b)]

    for requires_grad in (True, False):  # the transpose to time-major on x is recorded
        x = tensor.from_numpy(seqs(3)[0])
        x.requires_grad = requires_grad
        proto = sonnx.to_onnx([x], [m.forward(x)], model=m)
        check_runs(proto, m, seqs, batches=(3, 5))


class SizeOneStates(model.Model):
    """Tensors of size 1 along axis 0: parameters, BatchNorm statistics, plain attributes."""

    def __init__(self):
        super().__init__()
        self.conv = layer.Conv2d(1, 3, padding=1)  # one channel: (1,) running statistics
        self.bn = layer.BatchNorm2d()
        self.fc = layer.Linear(1)  # a (1,) bias
        self.scale = tensor.from_numpy(np.array([2.0], np.float32))
        self.row = tensor.from_numpy(np.ones((1, 1), np.float32))

    def forward(self, x):
        h = self.fc(autograd.flatten(self.bn(self.conv(x))))
        return autograd.add(autograd.mul(h, self.scale), self.row)


def test_batch_one_with_size_one_tensors():
    m = SizeOneStates()
    x = tensor.from_numpy(images(1)[0])
    x.requires_grad = True
    y = m.forward(x)
    proto = sonnx.to_onnx([x], [y], model=m)  # the model's states never count
    assert {i.name for i in proto.graph.initializer} == set(m.get_states())
    check_runs(proto, m, images, batches=(1, 4))
    with pytest.raises(sonnx.ExportError, match=r"batch size 1.*shape \(1,\), \(1, 1\).*ambiguous.*>= 2"):
        # without model=: scale and row could be per-example data
        sonnx.to_onnx([x], [y], dynamic_batch=True)
    proto = sonnx.to_onnx([x], [y], dynamic_batch=False)
    check_runs(proto, m, images, batches=(1,))
    x2 = tensor.from_numpy(images(2)[0])
    x2.requires_grad = True
    check_runs(sonnx.to_onnx([x2], [m.forward(x2)]), m, images, batches=(2, 5))


def test_output_of_a_graph_mode_step_is_named_in_the_error():
    m = MLP()
    m.set_optimizer(opt.SGD(lr=0.1))
    x = tensor.from_numpy(vectors(3)[0])
    t = tensor.from_numpy(np.arange(3, dtype=np.int32) % 4)
    m.compile([x], is_train=True, use_graph=True)
    m.train()
    for _ in range(2):  # the second step replays the compiled graph
        out, _ = m(x, t)
    with pytest.raises(sonnx.ExportError, match=r"no recorded graph.*graph mode \(compile\(.*use_graph=True"):
        sonnx.to_onnx([x], [out])
    check_runs(sonnx.to_onnx([x], [m.forward(x)], model=m), m, vectors)
