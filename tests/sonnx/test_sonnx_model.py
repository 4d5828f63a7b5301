"""SONNXModel with SINGA's API: forward returns the list of outputs, so SINGA's documented
subclass works as it is; ``last_layers`` (SONNXModel.forward and SingaRep.run) runs the
graph until its last layers, for transfer learning."""

from __future__ import annotations

import copy

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from sonnx_helpers import rand, session

from singa import autograd, device, layer, model, opt, sonnx, tensor


@pytest.fixture(autouse=True)
def seeded():
    device.get_default_device().set_rand_seed(0)


class Net(model.Model):
    """Exports to Gemm Relu (Constant) Reshape Tanh (Constant) Reshape Gemm: six layers
    (a Linear is one Gemm node, as PyTorch writes nn.Linear)."""

    def __init__(self):
        super().__init__()
        self.fc1 = layer.Linear(16)
        self.fc2 = layer.Linear(3)

    def forward(self, x):
        h = autograd.relu(self.fc1(x))
        h = autograd.reshape(h, (h.shape[0], 2, 8))
        h = autograd.reshape(autograd.tanh(h), (h.shape[0], 16))
        return self.fc2(h)


def exported():
    return sonnx.to_onnx([tensor.from_numpy(rand((3, 8)))], Net())


def layer_outputs(m):
    """The first output of every node other than Constant, in order."""
    return [n.output[0] for n in m.graph.node if n.op_type != "Constant"]


def with_outputs(m, names):
    """A copy of ``m`` whose graph outputs are the values ``names`` (for onnxruntime)."""
    m2 = copy.deepcopy(m)
    del m2.graph.output[:]
    m2.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names)
    return m2


class MyModel(sonnx.SONNXModel):  # SINGA's documented subclass, as it is
    def __init__(self, onnx_model):
        super(MyModel, self).__init__(onnx_model)  # noqa: UP008 (SINGA's code as it is)

    def forward(self, *x):
        y = super(MyModel, self).forward(*x)  # noqa: UP008
        return y[0]

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def batch(n=12):
    x = rand((n, 8), seed=n)
    y = (np.arange(n) % 3).astype(np.int64)
    return tensor.from_numpy(x), tensor.from_numpy(y)


def test_forward_returns_the_list_of_outputs():
    m = exported()
    sm = sonnx.SONNXModel(m)
    sm.eval()
    x = rand((4, 8))
    out = sm(tensor.from_numpy(x))
    assert isinstance(out, list) and len(out) == 1
    (want,) = session(m).run(None, {"input": x})
    np.testing.assert_allclose(out[0].to_numpy(), want, rtol=1e-5, atol=1e-6)
    out, hidden = sm.forward(tensor.from_numpy(x), aux_output=(layer_outputs(m)[1],))
    assert hidden.shape == (4, 16) and float(hidden.to_numpy().min()) >= 0


def test_singa_subclass_trains_and_checkpoints(tmp_path):
    m = exported()
    net = MyModel(m)
    net.set_optimizer(opt.SGD(lr=0.1, momentum=0.9))
    x, y = batch()
    net.compile([x], is_train=True, use_graph=False)
    net.train()
    losses = [float(net(x, y)[1]) for _ in range(10)]
    assert losses[-1] < losses[0] * 0.8
    net.eval()
    out = net(x)
    assert isinstance(out, tensor.Tensor) and out.shape == (12, 3)
    path = tmp_path / "my.ckpt"
    net.save_states(str(path), aux_states={"step": 10})
    other = MyModel(m)
    other.set_optimizer(opt.SGD(lr=0.1, momentum=0.9))
    assert other.load_states(str(path)).get("step") == 10
    other.eval()
    np.testing.assert_array_equal(other(x).to_numpy(), out.to_numpy())
    fresh = MyModel(m)
    fresh.eval()
    assert not np.allclose(fresh(x).to_numpy(), out.to_numpy())


def test_default_train_one_batch_still_works():
    sm = sonnx.SONNXModel(exported())
    sm.set_optimizer(opt.SGD(lr=0.1, momentum=0.9))
    sm.train()
    x, y = batch()
    out, loss = sm(x, y)
    assert isinstance(out, tensor.Tensor) and out.shape == (12, 3)
    losses = [float(sm(x, y)[1]) for _ in range(8)]
    assert losses[-1] < float(loss)


# SINGA's rule: the index of the last layer run; negative k gives (k + 1) mod n (n = 6)
@pytest.mark.parametrize(
    "last_layers,index", [(-1, 0), (-3, 4), (-4, 3), (-6, 1), (-7, 0), (3, 3), (1, 1), (0, 0)]
)
def test_last_layers_returns_the_output_of_the_last_layer_run(last_layers, index):
    m = exported()
    names = layer_outputs(m)
    assert len(names) == 6  # the two Constant nodes are not layers
    x = rand((5, 8))
    (want,) = session(with_outputs(m, [names[index]])).run(None, {"input": x})
    sm = sonnx.SONNXModel(m)
    sm.eval()
    got = sm(tensor.from_numpy(x), last_layers=last_layers)
    assert isinstance(got, list) and len(got) == 1
    np.testing.assert_allclose(got[0].to_numpy(), want, rtol=1e-5, atol=1e-6)
    (rep_got,) = sonnx.prepare(m).run([x], last_layers=last_layers)  # SingaRep.run takes it too
    np.testing.assert_allclose(rep_got, want, rtol=1e-5, atol=1e-6)


def test_last_layers_with_aux_output_and_the_full_count():
    m = exported()
    names = layer_outputs(m)
    x = rand((2, 8))
    full = sonnx.prepare(m).run([x])
    rep = sonnx.prepare(m)
    for whole in (5, -2):  # every layer: the graph outputs
        np.testing.assert_array_equal(rep.run([x], last_layers=whole)[0], full[0])
    cut, relu = rep.run([x], last_layers=-4, aux_output=(names[1],))
    want_cut, want_relu = session(with_outputs(m, [names[3], names[1]])).run(None, {"input": x})
    np.testing.assert_allclose(cut, want_cut, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(relu, want_relu, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="computed by the layers run"):
        rep.run([x], last_layers=2, aux_output=(names[3],))


@pytest.mark.parametrize("bad", [6, 7, -8, -20])
def test_bad_last_layers_is_a_clear_error(bad):
    sm = sonnx.SONNXModel(exported())
    sm.eval()
    with pytest.raises(
        ValueError, match=rf"last_layers={bad} is out of range: the graph has 6 layers .*0\.\.5 or -1\.\.-7"
    ):
        sm(tensor.from_numpy(rand((2, 8))), last_layers=bad)
    with pytest.raises(TypeError, match="last_layers must be an int"):
        sm(tensor.from_numpy(rand((2, 8))), last_layers=1.5)


def test_transfer_learning_with_last_layers():
    """SINGA's transfer-learning pattern: cut the last layer off, put a new head on."""

    class Transfer(sonnx.SONNXModel):
        def __init__(self, onnx_model):
            super().__init__(onnx_model)
            self.linear = layer.Linear(5)

        def forward(self, *x):
            y = super().forward(*x, last_layers=-3)[0]  # the features before fc2 (one Gemm)
            return self.linear(y)

        def train_one_batch(self, x, y):
            out = self.forward(x)
            loss = autograd.softmax_cross_entropy(out, y)
            self.optimizer(loss)
            return out, loss

    net = Transfer(exported())
    net.set_optimizer(opt.SGD(lr=0.1, momentum=0.9))
    x = tensor.from_numpy(rand((10, 8), seed=3))
    y = tensor.from_numpy((np.arange(10) % 5).astype(np.int64))
    net.compile([x], is_train=True, use_graph=False)
    assert "linear.W" in net.get_params() and any(k.startswith("params.") for k in net.get_params())
    w1 = net.params["fc1.W"].to_numpy()
    net.train()
    losses = [float(net(x, y)[1]) for _ in range(15)]
    assert losses[-1] < losses[0] * 0.7, losses
    assert not np.allclose(net.params["fc1.W"].to_numpy(), w1)  # the imported layers fine-tune too
    net.eval()
    assert net(x).shape == (10, 5)


def test_graph_mode_with_last_layers_matches_eager():
    m = exported()
    x = tensor.from_numpy(rand((4, 8)))
    outs = []
    for graph in (False, True):
        sm = sonnx.SONNXModel(m)
        sm.compile([x], is_train=False, use_graph=graph)
        sm.eval()
        outs.append([sm(x, last_layers=-3)[0].to_numpy() for _ in range(2)])
    np.testing.assert_allclose(outs[1][1], outs[0][0], rtol=1e-6)


def test_onnx_model_is_unchanged():
    m = exported()
    before = m.SerializeToString()
    sonnx.SONNXModel(m).forward(tensor.from_numpy(rand((2, 8))), last_layers=-3)
    assert m.SerializeToString() == before
    onnx.checker.check_model(m)


def bn_from_constants(identity=False, training_mode=0):
    """A third-party file shape: Conv -> BatchNormalization whose running mean/var come
    from Constant nodes (directly, or through an Identity) -> Flatten -> Gemm."""
    rng = np.random.default_rng(0)
    init = [
        onnx.numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "W"),
        onnx.numpy_helper.from_array(np.ones(4, np.float32), "scale"),
        onnx.numpy_helper.from_array(np.zeros(4, np.float32), "bias"),
        onnx.numpy_helper.from_array(rng.standard_normal((4 * 5 * 5, 3)).astype(np.float32), "fcW"),
    ]
    mean = onnx.numpy_helper.from_array(np.full(4, 0.5, np.float32))
    var = onnx.numpy_helper.from_array(np.full(4, 2.0, np.float32))
    nodes = [
        helper.make_node("Constant", [], ["m"], value=mean),
        helper.make_node("Constant", [], ["v"], value=var),
        helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
    ]
    stats = ["m", "v"]
    if identity:
        nodes += [helper.make_node("Identity", ["m"], ["mi"]), helper.make_node("Identity", ["v"], ["vi"])]
        stats = ["mi", "vi"]
    extra = {"training_mode": 1} if training_mode else {}
    outs = ["b", "rm", "rv"] if training_mode else ["b"]
    nodes += [
        helper.make_node("BatchNormalization", ["c", "scale", "bias", *stats], outs, **extra),
        helper.make_node("Flatten", ["b"], ["f"]),
        helper.make_node("Gemm", ["f", "fcW"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "bn_constants",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        initializer=init,
    )
    opset = 15 if training_mode else 13
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def test_batchnorm_statistics_from_constants_fine_tune_and_checkpoint(tmp_path):
    proto = bn_from_constants()
    x = tensor.from_numpy(rand((4, 2, 5, 5)))
    t = tensor.from_numpy(np.array([0, 1, 2, 0], np.int32))
    m = sonnx.SONNXModel(proto)
    assert set(m.buffers) == {"m", "v"} and m.onnx_names["m"] == "m"
    assert set(m.params) == {"W", "scale", "bias", "fcW"}
    m.set_optimizer(opt.SGD(lr=0.0))  # lr 0: only the running statistics move
    m.train()
    for _ in range(2):
        m(x, t)
    assert not np.allclose(m.buffers["m"].to_numpy(), 0.5)
    assert not np.allclose(m.buffers["v"].to_numpy(), 2.0)
    m.eval()
    want = m(x)[0].to_numpy()
    m.save_states(str(tmp_path / "ft.zip"))
    fresh = sonnx.SONNXModel(proto)
    fresh.eval()
    assert not np.allclose(fresh(x)[0].to_numpy(), want)
    fresh.load_states(str(tmp_path / "ft.zip"))
    np.testing.assert_array_equal(fresh(x)[0].to_numpy(), want)
    # the file is untouched, and prepare() runs it with the original statistics
    assert np.allclose(
        sonnx.prepare(proto).run([x.to_numpy()])[0], session(proto).run(None, {"x": x.to_numpy()})[0]
    )


def test_batchnorm_training_never_writes_into_constants():
    x = rand((4, 2, 5, 5))
    # statistics reaching BatchNorm through an Identity are no state: copied, never written
    m = sonnx.SONNXModel(bn_from_constants(identity=True))
    assert set(m.buffers) == set()
    m.set_optimizer(opt.SGD(lr=0.01))
    m.train()
    out, loss = m(tensor.from_numpy(x), tensor.from_numpy(np.array([0, 1, 2, 0], np.int32)))
    assert np.isfinite(loss.to_numpy()).all()
    # prepare(...).run with training_mode=1: batch statistics, the Constants untouched
    rep = sonnx.prepare(bn_from_constants(training_mode=1))
    first = rep.run([x])[0]
    np.testing.assert_array_equal(rep.run([x])[0], first)
    np.testing.assert_allclose(
        first, session(bn_from_constants(training_mode=1)).run(None, {"x": x})[0], rtol=1e-4, atol=1e-4
    )
