"""Import: prepare/run (the ONNX backend API), round trips of exported models, and
SONNXModel training, checkpointing and re-export."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from sonnx_helpers import check_export, rand, reference

from singa import autograd, device, layer, model, opt, sonnx, tensor
from singa.autograd.conv_transpose import conv_transpose2d
from singa.tensor import Tensor


@pytest.fixture(autouse=True)
def seeded():
    device.get_default_device().set_rand_seed(0)


class SmallCNN(model.Model):
    """Conv (asymmetric pads, groups) + BN + pooling + dropout + linear."""

    def __init__(self, classes=4):
        super().__init__()
        self.conv1 = layer.Conv2d(4, 3, padding=(1, 0, 1, 2))
        self.bn1 = layer.BatchNorm2d()
        self.conv2 = layer.Conv2d(4, 3, padding=1, group=2)
        self.pool = layer.MaxPool2d(2, 2, ceil_mode=True)
        self.drop = layer.Dropout(0.3)
        self.fc = layer.Linear(classes)

    def forward(self, x):
        y = autograd.relu(self.bn1(self.conv1(x)))
        y = self.pool(autograd.relu(self.conv2(y)))
        return self.fc(self.drop(autograd.flatten(y)))


def images(b):
    return [rand((b, 2, 7, 6))]


def exported_cnn():
    net = SmallCNN()
    x = tensor.from_numpy(images(3)[0])
    net.train()
    net.forward(x)  # move the BN statistics away from their initial values
    return net, sonnx.to_onnx([x], net)


def roundtrip(target, make, batches=(3, 5), **kwargs):
    m = sonnx.to_onnx([tensor.from_numpy(a) for a in make(batches[0])], target, **kwargs)
    rep = sonnx.prepare(m)
    for b in batches:
        arrays = make(b)
        for want, got in zip(reference(target, arrays), rep.run(arrays), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return m


# ----- prepare / run ----------------------------------------------------------------------------------
def test_prepare_from_proto_path_and_bytes(tmp_path):
    net, m = exported_cnn()
    x = images(4)[0]
    want = reference(net, [x])[0]
    path = tmp_path / "cnn.onnx"
    onnx.save(m, path)
    for src in (m, str(path), path, m.SerializeToString()):
        (got,) = sonnx.prepare(src, "CPU").run([x])
        assert isinstance(got, np.ndarray)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_run_with_tensors_dicts_and_device_objects():
    net, m = exported_cnn()
    x = images(2)[0]
    rep = sonnx.prepare(m, device.get_default_device())
    (t,) = rep.run([tensor.from_numpy(x)])
    assert isinstance(t, Tensor)
    (d,) = rep.run({"input": x})
    np.testing.assert_allclose(t.to_numpy(), d, rtol=1e-6)
    with pytest.raises(ValueError, match="no value given for graph input"):
        rep.run({"other": x})


def test_backend_api_and_run_node():
    assert sonnx.SingaBackend.supports_device("CPU")
    node = helper.make_node("Relu", ["x"], ["y"])
    (y,) = sonnx.SingaBackend.run_node(node, [np.array([-1.0, 2.0], np.float32)])
    np.testing.assert_array_equal(y, [0.0, 2.0])
    assert {"Conv", "ConvTranspose", "Gemm", "Slice", "Cast"} <= set(sonnx.supported_ops())


def test_old_opsets_convert_and_unknown_ops_are_refused():
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    old = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
    np.testing.assert_array_equal(sonnx.prepare(old).run([np.array([-2.0], np.float32)])[0], [0.0])
    g.node[0].op_type = "FancyNewOp"
    g.node[0].name = "det"
    with pytest.raises(sonnx.UnsupportedOperator, match=r"FancyNewOp \(node 'det'\)"):
        sonnx.prepare(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_hand_written_graph_with_shape_arithmetic():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as PyTorch exports flatten."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["flat"]),
        helper.make_node("Gemm", ["flat", "W", "b"], ["y"], transB=1),
        helper.make_node("Clip", ["y", "lo", ""], ["z"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "ax0"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
        numpy_helper.from_array(rand((3, 12), seed=1), "W"),
        numpy_helper.from_array(rand((3,), seed=2), "b"),
        numpy_helper.from_array(np.array(0.1, np.float32), "lo"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 3])],
        initializer=inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(m, full_check=True)
    x = rand((5, 3, 4))
    (got,) = sonnx.prepare(m).run([x])
    w, b = numpy_helper.to_array(inits[3]), numpy_helper.to_array(inits[4])
    np.testing.assert_allclose(got, np.maximum(x.reshape(5, -1) @ w.T + b, 0.1), rtol=1e-5, atol=1e-6)
    sm = sonnx.SONNXModel(m)  # W and b are trainable; the integer shape pieces and the bound are not
    assert set(sm.params) == {"W", "b"}
    assert set(sm.buffers) == {"zero", "ax0", "minus1", "lo"}


# ----- round trips --------------------------------------------------------------------------------
def test_roundtrip_cnn():
    net, _ = exported_cnn()
    roundtrip(net, images)


@pytest.mark.parametrize("opset", [11, 13, 17, 18])
def test_roundtrip_functional_ops_across_opsets(opset):
    w = Tensor(data=rand((4, 3, 3, 3), seed=3), requires_grad=True, stores_grad=True, name="w")
    wt = Tensor(data=rand((4, 2, 2, 2), seed=4), requires_grad=True, stores_grad=True, name="wt")
    s = Tensor(data=rand((2, 5, 5), seed=5), requires_grad=True, stores_grad=True, name="s")

    def f(x):
        y = autograd.conv2d(x, w, None, 1, (1, 0, 0, 1), 1, 1)
        y = conv_transpose2d(autograd.gelu(y), wt, None, stride=2)
        y = autograd.avg_pool_2d(y, 3, 2, 1, ceil_mode=True, count_include_pad=False)
        y = autograd.layer_norm(autograd.squeeze(autograd.unsqueeze(y, 1), 1), s, None, axis=1)
        y = autograd.pad(y, "reflect", [0, 0, 1, 1, 0, 0, 1, 1])
        y = autograd.reduce_mean(y, [2], keepdims=1)
        parts = autograd.split(y, 1, 2)
        y = autograd.cat([autograd.softmax(parts[0], axis=1), autograd.log_softmax(parts[1], axis=3)], 1)
        return autograd.clip(y[:, :, 0, 1:], -1.0, None)

    roundtrip(f, lambda b: [rand((b, 3, 5, 5))], opset=opset)


def test_roundtrip_losses_and_training_graph():
    fc = Tensor(data=rand((6, 4), seed=6), requires_grad=True, stores_grad=True, name="fc")

    def f(x, t):
        return autograd.softmax_cross_entropy(autograd.matmul(x, fc), t)

    roundtrip(f, lambda b: [rand((b, 6)), (np.arange(b) % 4).astype(np.int64)])
    roundtrip(f, lambda b: [rand((b, 6)), np.eye(4, dtype=np.float32)[np.arange(b) % 4]])


# ----- SONNXModel --------------------------------------------------------------------------------
def test_sonnx_model_parameters_and_buffers():
    net, m = exported_cnn()
    sm = sonnx.SONNXModel(m)
    assert set(sm.onnx_names.values()) == set(net.get_states())
    assert sm.onnx_names["conv1.W"] == "conv1.W"
    assert "bn1.running_mean" in sm.buffers and "bn1.scale" in sm.params
    assert all(t.stores_grad for t in sm.get_params().values())
    assert "params.conv1.W" in sm.get_states() and "buffers.bn1.running_var" in sm.get_states()
    sm.eval()
    x = images(3)[0]
    np.testing.assert_allclose(
        sm(tensor.from_numpy(x))[0].to_numpy(), reference(net, [x])[0], rtol=1e-5, atol=1e-6
    )


def test_sonnx_model_fine_tunes_and_checkpoints(tmp_path):
    _, m = exported_cnn()
    sm = sonnx.SONNXModel(m)
    sm.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    x = tensor.from_numpy(images(8)[0])
    y = tensor.from_numpy((np.arange(8) % 4).astype(np.int64))
    rm = sm.buffers["bn1.running_mean"].to_numpy()
    sm.train()
    losses = [float(sm(x, y)[1]) for _ in range(8)]
    assert losses[-1] < losses[0] * 0.7
    assert not np.allclose(sm.buffers["bn1.running_mean"].to_numpy(), rm)  # BN trained in place
    sm.eval()
    (out,) = [o.to_numpy() for o in sm(x)]
    path = tmp_path / "ft.ckpt"
    sm.save_states(str(path), aux_states={"epoch": 1})
    other = sonnx.SONNXModel(m)
    other.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    aux = other.load_states(str(path))
    assert aux.get("epoch") == 1
    other.eval()
    np.testing.assert_allclose(other(x)[0].to_numpy(), out, rtol=1e-6)


def test_sonnx_model_aux_output_and_reexport():
    net, m = exported_cnn()
    sm = sonnx.SONNXModel(m)
    sm.eval()
    x = tensor.from_numpy(images(3)[0])
    first_relu = next(n.output[0] for n in m.graph.node if n.op_type == "Relu")
    out, hidden = sm(x, aux_output=(first_relu,))
    assert hidden.shape[:2] == (3, 4)
    again = check_export(sm, images)  # an imported model exports again
    assert {i.name for i in again.graph.initializer} == set(sm.get_states())
    assert out.shape == (3, 4)


def test_sonnx_model_in_graph_mode_trains_like_eager():
    _, m = exported_cnn()
    x = tensor.from_numpy(images(6)[0])
    y = tensor.from_numpy((np.arange(6) % 4).astype(np.int64))
    curves = []
    for graph in (False, True):
        sm = sonnx.SONNXModel(m)
        sm.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
        sm.compile([x], is_train=True, use_graph=graph)
        curves.append([float(sm(x, y)[1]) for _ in range(4)])
    np.testing.assert_allclose(curves[1], curves[0], rtol=1e-5)
    assert curves[0][-1] < curves[0][0]
