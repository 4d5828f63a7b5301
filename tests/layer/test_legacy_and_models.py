"""Legacy autograd layer names, nested models (names, states, modes) and the two examples."""

import importlib.util
import pathlib

import numpy as np
import pytest
from layer_helpers import t64

from singa import autograd, device, layer
from singa.layer import legacy
from singa.tensor import Tensor

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "autograd"


def load_example(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_autograd_exposes_the_legacy_layers():
    # the names SINGA's autograd documentation and examples use
    names = ["Layer", "Linear", "Conv2d", "SeparableConv2d", "BatchNorm2d", "MaxPool2d", "AvgPool2d", "ReLU"]
    for name in names + ["MaxPool1d", "AvgPool1d", "RNN", "LSTM"]:
        assert getattr(autograd, name) is getattr(legacy, name)
    assert autograd.Layer is layer.Layer
    assert issubclass(autograd.Conv2d, layer.Conv2d) and issubclass(autograd.ReLU, layer.ReLU)
    with pytest.raises(AttributeError):
        autograd.NoSuchLayer  # noqa: B018


def test_legacy_signatures_create_params_eagerly():
    fc = autograd.Linear(6, 4, bias=False)
    assert fc.W.shape == (6, 4) and fc.b is None
    conv = autograd.Conv2d(3, 8, 3, stride=2, padding=1, group=1, bias=True)
    assert conv.W.shape == (8, 3, 3, 3) and conv.b.shape == (8,)
    assert autograd.Conv2d(4, 8, 3, 1, 1, 1, 2).W.shape == (8, 2, 3, 3)  # positional group
    sep = autograd.SeparableConv2d(4, 6, 3, 1, 1)
    assert list(sep.get_params()) == ["depthwise_conv.W", "point_conv.W"]
    bn = autograd.BatchNorm2d(8, 0.95)
    assert bn.momentum == 0.95 and list(bn.get_states()) == ["scale", "bias", "running_mean", "running_var"]
    x = t64(np.random.default_rng(0).standard_normal((2, 3, 6, 6)))
    y = autograd.MaxPool2d(2)(autograd.ReLU()(bn(conv(x))))
    assert y.shape == (2, 8, 1, 1)  # conv: 3x3, pool 2 -> 1
    assert autograd.AvgPool2d(3, 1, 1)(x).shape == x.shape
    assert autograd.MaxPool1d(2)(t64(np.ones((2, 3, 8)))).shape == (2, 3, 4)
    assert autograd.AvgPool1d(2, 1)(t64(np.ones((2, 3, 8)))).shape == (2, 3, 7)
    for cls in (autograd.Linear, autograd.Conv2d):
        with pytest.raises(TypeError):
            cls(4)  # every size is required in the legacy form


def test_legacy_rnn_and_lstm_list_form():
    xs = [t64(np.random.default_rng(i).standard_normal((2, 3))) for i in range(4)]
    h0 = t64(np.zeros((2, 5)))
    out, h = legacy.RNN(3, 5)(xs, h0)
    assert len(out) == 4 and h.shape == (2, 5)
    np.testing.assert_array_equal(out[-1].to_numpy(), h.to_numpy())
    out, h, c = legacy.LSTM(3, 5)(xs, (h0, h0))
    assert len(out) == 4 and h.shape == c.shape == (2, 5)


class Inner(layer.Layer):
    def __init__(self):
        super().__init__()
        self.conv = layer.Conv2d(4, 3, padding=1)
        self.bn = layer.BatchNorm2d()

    def forward(self, x):
        return self.bn(self.conv(x))


class Net(layer.Layer):
    def __init__(self, reverse=False):
        super().__init__()
        self.reverse = reverse
        self.stem = Inner()
        self.branches = [layer.Conv2d(2, 1), Inner()]
        self.head = {"fc": layer.Linear(3)}

    def forward(self, x):
        if self.reverse:  # create the branches' parameters in the other order
            b1 = self.branches[1](x)
            b0 = self.branches[0](x)
        else:
            b0 = self.branches[0](x)
            b1 = self.branches[1](x)
        y = autograd.cat([self.stem(x), b0, b1], 1)
        return self.head["fc"](autograd.flatten(y))


NET_STATES = [
    "stem.conv.W",
    "stem.conv.b",
    "stem.bn.scale",
    "stem.bn.bias",
    "stem.bn.running_mean",
    "stem.bn.running_var",
    "branches.0.W",
    "branches.0.b",
    "branches.1.conv.W",
    "branches.1.conv.b",
    "branches.1.bn.scale",
    "branches.1.bn.bias",
    "branches.1.bn.running_mean",
    "branches.1.bn.running_var",
    "head.fc.W",
    "head.fc.b",
]


def test_nested_names_are_paths_independent_of_creation_order():
    x = t64(np.random.default_rng(1).standard_normal((2, 3, 4, 4)))
    a, b = Net(), Net(reverse=True)
    assert a.get_states() == {}
    a(x)
    b(x)
    assert list(a.get_states()) == list(b.get_states()) == NET_STATES
    assert [n for n in NET_STATES if "running" not in n] == list(a.get_params())
    assert a.head["fc"].W.shape == (4 * 4 * (4 + 2 + 4), 3)  # 4 + 2 + 4 channels
    # as in SINGA, each tensor carries its dotted name once created
    assert all(t.name == n for n, t in a.get_states().items())
    assert all(t.name == n for n, t in b.get_states().items())


def test_state_round_trip_and_partial_loading():
    x = t64(np.random.default_rng(2).standard_normal((2, 3, 4, 4)))
    a, b = Net(), Net()
    a(x)
    a(x)  # move the running statistics away from their initial values
    saved = {n: t.to_numpy() for n, t in a.get_states().items()}
    with pytest.raises(ValueError, match="unexpected: stem.conv.W"):
        b.set_states(saved)  # lazily sized: no states before the first call
    b(x)
    b.set_states(saved)
    a.eval()
    b.eval()
    np.testing.assert_array_equal(a(x).to_numpy(), b(x).to_numpy())
    partial = {k: v for k, v in saved.items() if k.startswith("stem.")}
    partial["head.fc.W"] = np.zeros((1, 1))
    c = Net()
    c(x)
    with pytest.raises(ValueError, match="head.fc.W: expected"):
        c.set_states(partial)
    res = c.set_states(partial, strict=False)
    assert res.missing == [n for n in NET_STATES if not n.startswith("stem.") and n != "head.fc.W"]
    assert len(res.mismatched) == 1 and res.unexpected == []
    np.testing.assert_array_equal(c.stem.bn.running_var.to_numpy(), saved["stem.bn.running_var"])


def test_gradient_reaches_every_parameter_of_a_nested_model():
    net = Net()
    x = t64(np.random.default_rng(3).standard_normal((2, 3, 4, 4)))
    loss = autograd.softmax_cross_entropy(net(x), Tensor(data=np.array([0, 2]), requires_grad=False))
    grads = dict(autograd.backward(loss))
    params = net.get_params()
    assert set(grads) == set(params.values())
    for t, g in grads.items():
        assert g.shape == t.shape and np.abs(g.to_numpy()).sum() > 0


def test_params_follow_a_gpu_input():
    cupy = pytest.importorskip("cupy")
    if device.get_num_gpus() == 0:
        pytest.skip("no CUDA GPU")
    gpu = device.create_cuda_gpu()
    x = Tensor(data=np.ones((2, 3, 4, 4), np.float32), device=gpu, requires_grad=False)
    lazy, eager = layer.Conv2d(2, 3), autograd.Conv2d(3, 2, 3)
    for lay in (lazy, eager):
        y = lay(x)
        assert isinstance(y.data, cupy.ndarray) and lay.W.device is gpu


# ----- the examples --------------------------------------------------------------------
def test_mnist_cnn_example_runs_small():
    mod = load_example("mnist_cnn")
    losses = mod.main(["--image-size", "8", "--batch-size", "4", "--steps", "3", "--num-samples", "16"])
    assert len(losses) == 3 and all(np.isfinite(losses))


@pytest.mark.slow
def test_mnist_cnn_example_keeps_learning_on_fashion_mnist_mini():
    """With its default learning rate the loss falls and stays down (it rose late in a
    50-step run with lr 5e-3: see the example's docstring)."""
    mod = load_example("mnist_cnn")
    losses = mod.main(["--dataset", "fashion-mnist-mini", "--steps", "50"])
    first, last = np.mean(losses[:10]), np.mean(losses[-10:])
    assert last < 0.8 < first and max(losses[-20:]) < 1.5


def test_mnist_cnn_example_missing_dataset_is_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("SINGA_DATA", str(tmp_path))
    monkeypatch.setattr(
        "singa.data.download.download_file", lambda *a, **k: (_ for _ in ()).throw(OSError("offline"))
    )
    mod = load_example("mnist_cnn")
    with pytest.raises(SystemExit) as e:
        mod.main(["--dataset", "mnist"])
    msg = str(e.value)
    assert msg.startswith("mnist_cnn.py: cannot load dataset 'mnist'") and "\n" not in msg


def test_xception_block_names_and_gradients():
    mod = load_example("xceptionnet")
    device.get_default_device().set_rand_seed(0)
    block = mod.Block(4, 8, 2, 2, start_with_relu=False, grow_first=True)
    names = list(block.get_states())
    assert names[:3] == ["skip.W", "skipbn.scale", "skipbn.bias"]
    assert "layers.0.depthwise_conv.W" in names and "layers.3.point_conv.W" in names
    assert "layers.1.running_mean" in names
    x = t64(np.random.default_rng(4).standard_normal((2, 4, 6, 6)))
    y = block(x)
    assert y.shape == (2, 8, 3, 3)
    grads = dict(autograd.backward(autograd.reduce_sum(autograd.mul(y, y), keepdims=0)))
    assert set(grads) == set(block.get_params().values())


def test_xception_feature_size_formula():
    mod = load_example("xceptionnet")
    assert mod.feature_size(299) == 10 and mod.feature_size(291) == 10 and mod.feature_size(290) == 9
    assert mod.feature_size(71) == 3


def test_xception_small_image_one_step():
    mod = load_example("xceptionnet")
    device.get_default_device().set_rand_seed(0)
    model = mod.Xception(num_classes=10)
    names = list(model.get_params())
    assert len(names) == len(set(names)) and names[:2] == ["conv1.W", "bn1.scale"]
    assert "block12.skip.W" in names and "fc.b" in names and "block4.layers.2.bias" in names
    model.globalpooling = autograd.MaxPool2d(mod.feature_size(71), 1)
    x = Tensor(data=np.random.default_rng(5).standard_normal((2, 3, 71, 71)).astype(np.float32))
    out = model(x)
    assert out.shape == (2, 10)
    loss = autograd.softmax_cross_entropy(out, Tensor(data=np.array([1, 7]), requires_grad=False))
    grads = dict(autograd.backward(loss))
    assert set(grads) == set(model.get_params().values())
    assert all(g.dtype == np.float32 for g in grads.values())


def test_xception_example_main_small():
    losses = load_example("xceptionnet").main(["--image-size", "71", "--iters", "2", "--num-classes", "10"])
    assert len(losses) == 2 and all(np.isfinite(losses))


@pytest.mark.slow
def test_xception_example_main_299():
    losses = load_example("xceptionnet").main(["--iters", "1"])
    assert len(losses) == 1 and np.isfinite(losses[0])


def test_legacy_batchnorm_follows_autograd_training_like_singa():
    import numpy as np

    from singa import autograd as ag
    from singa import tensor as tn

    bn = ag.BatchNorm2d(2)
    x = tn.Tensor(data=np.random.default_rng(0).standard_normal((4, 2, 3, 3)) * 3 + 1)
    prev = ag.training
    try:
        ag.training = False  # SINGA's examples evaluate this way
        y = bn(x)
        np.testing.assert_array_equal(bn.running_mean.to_numpy(), 0)  # running stats untouched
        np.testing.assert_allclose(y.to_numpy(), x.to_numpy() / np.sqrt(1 + 1e-5), rtol=1e-5)
        ag.training = True
        bn(x)
        assert np.abs(bn.running_mean.to_numpy()).sum() > 0
        assert bn.training  # the layer's own mode is left as it was
    finally:
        ag.training = prev
