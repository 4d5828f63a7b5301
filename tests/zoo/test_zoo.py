"""The model zoo: registry, building at small and large input sizes, forward and
train_one_batch, graph mode, modes, errors, ONNX export."""

from __future__ import annotations

import numpy as np
import pytest

from singa import device, layer, opt, sonnx, tensor, zoo
from singa.zoo.base import SMALL_IMAGE, image_hw

ALL = ["mlp", "cnn", "alexnet", "resnet8", "resnet20", "resnet18", "resnet34", "resnet50", "xceptionnet"]
SIZE_DEPENDENT = ["alexnet", "resnet18", "resnet34", "resnet50", "xceptionnet"]


def _batch(n: int, c: int, s: int, classes: int = 10, seed: int = 0) -> tuple[tensor.Tensor, tensor.Tensor]:
    rng = np.random.default_rng(seed)
    x = tensor.from_numpy(rng.standard_normal((n, c, s, s)).astype(np.float32))
    y = tensor.from_numpy(rng.integers(0, classes, n).astype(np.int32))
    return x, y


def _trained_step(name: str, c: int, s: int, classes: int = 10, graph: bool = False, **kw):
    device.get_default_device().set_rand_seed(0)
    m = zoo.create(name, num_classes=classes, num_channels=c, **kw)
    m.set_optimizer(opt.SGD(0.01, momentum=0.9))
    x, y = _batch(2, c, s, classes)
    m.compile([x], is_train=True, use_graph=graph)
    before = {k: t.to_numpy() for k, t in m.get_params().items()}
    out, loss = m(x, y)
    return m, before, out, loss


# ----- registry -----------------------------------------------------------------------------------
def test_names_lists_every_model_in_order():
    assert zoo.names() == ALL + ["vit", "gpt"]  # the transformers: tests/zoo/test_transformer_zoo.py


def test_describe_and_aliases():
    assert "ResNet-18" in zoo.describe("resnet18")
    assert isinstance(zoo.create("xception", num_channels=3), zoo.Xception)
    assert isinstance(zoo.create("ResNet_18", num_channels=3), zoo.ResNet)


def test_create_unknown_model_names_the_available_ones():
    with pytest.raises(ValueError, match="unknown model 'vgg'.*cnn"):
        zoo.create("vgg")


def test_create_passes_keyword_arguments():
    m = zoo.create("mlp", num_classes=3, num_channels=1, hidden=(7, 5))
    x, _ = _batch(4, 1, 6, 3)
    m.compile([x], is_train=False)
    assert [fc.W.shape for fc in m.hidden_layers] == [(36, 7), (7, 5)]
    assert m.fc.W.shape == (5, 3)


def test_register_a_custom_model():
    zoo.register("tiny-mlp", lambda **kw: zoo.MLP(hidden=(4,), **kw), "a test model")
    try:
        assert "tiny-mlp" in zoo.names()
        assert zoo.create("tiny-mlp", num_classes=2).hidden == (4,)
    finally:
        zoo._REGISTRY.pop("tiny-mlp")


@pytest.mark.parametrize("bad", [{"num_classes": 0}, {"num_channels": 0}])
def test_invalid_class_or_channel_counts(bad):
    with pytest.raises(ValueError, match="must be >= 1"):
        zoo.create("cnn", **bad)


def test_image_hw():
    assert image_hw(None) is None
    assert image_hw(28) == (28, 28)
    assert image_hw((32, 24)) == (32, 24)
    for bad in ((1, 2, 3), "x", 0):
        with pytest.raises(ValueError):
            image_hw(bad)


# ----- building, forward and one training step at small sizes ------------------------------------
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize(("channels", "size"), [(1, 28), (3, 32)])
def test_forward_and_train_one_batch_small(name, channels, size):
    m, before, out, loss = _trained_step(name, channels, size)
    assert isinstance(m, zoo.Classifier)
    assert out.shape == (2, 10)
    assert loss.shape == (1,) and np.isfinite(float(loss))
    # the step changed every parameter that received a gradient (all of them here)
    changed = [k for k, t in m.get_params().items() if not np.array_equal(t.to_numpy(), before[k])]
    assert len(changed) == len(before) > 0
    # softmax cross-entropy of the returned logits is the returned loss
    logits = out.to_numpy().astype(np.float64)
    y = _batch(2, channels, size)[1].to_numpy()
    lse = np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1)) + logits.max(1)
    np.testing.assert_allclose(float(loss), np.mean(lse - logits[[0, 1], y]), rtol=1e-4)
    if name in SIZE_DEPENDENT:
        assert m.image_size == (size, size) and m.small_input


@pytest.mark.parametrize("name", SIZE_DEPENDENT)
def test_large_variant_at_its_smallest_size(name):
    """Just above SMALL_IMAGE the ImageNet stem is used (and still fits)."""
    s = SMALL_IMAGE + 1
    m, _, out, loss = _trained_step(name, 3, s, classes=5)
    assert not m.small_input
    assert out.shape == (2, 5) and np.isfinite(float(loss))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "size"), [("alexnet", 224), ("resnet18", 224), ("resnet50", 224), ("xceptionnet", 299)]
)
def test_large_variant_at_imagenet_size(name, size):
    device.get_default_device().set_rand_seed(0)
    m = zoo.create(name, num_classes=7, num_channels=3, image_size=size)
    m.set_optimizer(opt.SGD(0.01))
    x, y = _batch(1, 3, size, 7)
    m.compile([x], is_train=True)
    out, loss = m(x, y)
    assert out.shape == (1, 7) and np.isfinite(float(loss))


def test_stems_follow_the_input_size():
    small = zoo.create("resnet18", num_channels=3, image_size=32)
    large = zoo.create("resnet18", num_channels=3, image_size=224)
    assert small.conv1.kernel_size == (3, 3) and small.maxpool is None
    assert large.conv1.kernel_size == (7, 7) and large.conv1.stride == (2, 2) and large.maxpool is not None
    a_small = zoo.create("alexnet", num_channels=3, image_size=28)
    a_large = zoo.create("alexnet", num_channels=3, image_size=(224, 224))
    assert a_small.conv1.kernel_size == (3, 3) and a_small.linear1.out_features == 1024
    assert a_large.conv1.kernel_size == (11, 11) and a_large.linear1.out_features == 4096
    x_small = zoo.create("xceptionnet", num_channels=3, image_size=32)
    x_large = zoo.create("xceptionnet", num_channels=3, image_size=299)
    assert x_small.conv1.stride == (1, 1) and x_large.conv1.stride == (2, 2)


def test_lazy_build_takes_the_first_input_size_and_the_model_mode():
    m = zoo.create("alexnet", num_classes=4, num_channels=3)
    assert m.image_size is None and m.get_params() == {}
    m.eval()  # before the layers exist
    x, _ = _batch(3, 3, 32, 4)
    m.compile([x], is_train=False)
    assert m.image_size == (32, 32) and m.small_input
    assert all(not sub.training for sub in m.sublayers().values())
    # evaluation mode: dropout is the identity, so two calls agree exactly
    np.testing.assert_array_equal(m(x).to_numpy(), m(x).to_numpy())
    m.train()
    assert m.dropout1.training


def test_parameter_names_are_stable():
    m = zoo.create("resnet18", num_channels=3, image_size=32)
    x, _ = _batch(1, 3, 32)
    m.compile([x], is_train=False)
    names = m.get_states()
    for key in (
        "conv1.W",
        "bn1.running_mean",
        "layer1.0.conv1.W",
        "layer2.0.shortcut.0.W",
        "layer4.1.bn2.scale",
        "fc.W",
    ):
        assert key in names
    assert names["fc.W"].shape == (512, 10)
    r50 = zoo.create("resnet50", num_channels=3, image_size=32)
    r50.compile([x], is_train=False)
    assert r50.get_params()["fc.W"].shape == (2048, 10)
    assert r50.get_params()["layer1.0.conv3.W"].shape == (256, 64, 1, 1)


def test_parameter_counts_match_the_reference_architectures():
    """ResNet-18/50 with 1000 classes at 224: torchvision's 11,689,512 and 25,557,032."""
    x, _ = _batch(1, 3, 224)
    for name, expected in (("resnet18", 11_689_512), ("resnet50", 25_557_032)):
        m = zoo.create(name, num_classes=1000, num_channels=3, image_size=224)
        # build the parameters without running the 224x224 forward pass
        m.compile([tensor.from_numpy(np.zeros((1, 3, 65, 65), np.float32))], is_train=False)
        n = sum(t.size() for t in m.get_params().values())
        assert n == expected, name
    del x


def test_cifar_resnet_depths():
    for depth, blocks in ((8, 1), (20, 3), (32, 5)):
        m = zoo.CifarResNet(depth=depth, num_channels=3)
        assert [len(s) for s in (m.layer1, m.layer2, m.layer3)] == [blocks] * 3
    with pytest.raises(ValueError, match="6n \\+ 2"):
        zoo.CifarResNet(depth=10)


def test_the_mnist_cnn_architecture():
    m = zoo.create("cnn", num_classes=10, num_channels=1)
    x, _ = _batch(2, 1, 28)
    m.compile([x], is_train=False)
    shapes = {k: t.shape for k, t in m.get_params().items()}
    assert shapes == {
        "conv1.W": (32, 1, 5, 5),
        "conv1.b": (32,),
        "conv2.W": (64, 32, 5, 5),
        "conv2.b": (64,),
        "linear1.W": (1024, 500),
        "linear1.b": (500,),
        "linear2.W": (500, 10),
        "linear2.b": (10,),
    }


# ----- errors ---------------------------------------------------------------------------------------
def test_wrong_channel_count_is_a_clear_error():
    m = zoo.create("resnet8", num_channels=3)
    x, _ = _batch(2, 1, 32)
    with pytest.raises(ValueError, match=r"expected input \(N, 3, H, W\)"):
        m.compile([x], is_train=False)


def test_cnn_rejects_too_small_images():
    m = zoo.create("cnn")
    x, _ = _batch(2, 1, 12)
    with pytest.raises(ValueError, match="at least 16x16"):
        m.compile([x], is_train=False)


def test_training_needs_an_optimizer():
    m = zoo.create("mlp")
    x, y = _batch(2, 1, 8)
    m.compile([x], is_train=True)
    with pytest.raises(RuntimeError, match="set_optimizer"):
        m(x, y)


def test_distributed_options_need_a_distopt():
    m = zoo.create("mlp")
    m.set_optimizer(opt.SGD(0.1))
    x, y = _batch(2, 1, 8)
    m.compile([x], is_train=True)
    with pytest.raises(ValueError, match="needs a DistOpt"):
        m.train_one_batch(x, y, "half")
    with pytest.raises(ValueError, match="dist_option must be one of"):
        m.train_one_batch(x, y, "fancy")


def test_distributed_options_run_in_one_process():
    """In a process that no launcher started, DistOpt is a job of one rank: every
    option trains and 'plain' gives the wrapped optimizer's numbers exactly."""
    ref, got = zoo.create("mlp"), zoo.create("mlp")
    x, y = _batch(4, 1, 8)
    for m, o in ((ref, opt.SGD(0.1)), (got, opt.DistOpt(opt.SGD(0.1)))):
        device.get_default_device().set_rand_seed(0)
        m.set_optimizer(o)
        m.compile([x], is_train=True)
        m(x, y)
    for (n, a), b in zip(ref.get_params().items(), got.get_params().values()):
        np.testing.assert_array_equal(a.to_numpy(), b.to_numpy(), err_msg=n)
    assert got.optimizer.world_size == 1
    for option in ("half", "partialUpdate", "sparseTopK", "sparseThreshold"):
        got(x, y, option, 0.05)


# ----- behaviour ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["mlp", "cnn", "resnet8"])
def test_repeated_steps_fit_a_fixed_batch(name):
    device.get_default_device().set_rand_seed(1)
    m = zoo.create(name, num_classes=4, num_channels=1)
    m.set_optimizer(opt.SGD(0.05, momentum=0.9))
    x, y = _batch(8, 1, 28, 4, seed=3)
    m.compile([x], is_train=True)
    losses = []
    for _ in range(15):
        out, loss = m(x, y)
        losses.append(float(loss))
    assert losses[-1] < 0.5 * losses[0]
    # (training-mode outputs: BatchNorm's running statistics lag behind after 15 steps)
    assert (out.to_numpy().argmax(1) == y.to_numpy()).mean() >= 0.75


@pytest.mark.parametrize("name", ["cnn", "resnet8", "alexnet"])
def test_graph_mode_matches_eager_bitwise(name):
    results = []
    for graph in (False, True):
        device.get_default_device().set_rand_seed(0)
        m = zoo.create(name, num_classes=10, num_channels=3)
        m.set_optimizer(opt.SGD(0.01, momentum=0.9))
        x, y = _batch(2, 3, 32)
        m.compile([x], is_train=True, use_graph=graph)
        losses = [float(m(x, y)[1]) for _ in range(3)]
        results.append((losses, {k: t.to_numpy() for k, t in m.get_states().items()}))
    (l0, s0), (l1, s1) = results
    assert l0 == l1
    assert s0.keys() == s1.keys()
    for k in s0:
        np.testing.assert_array_equal(s0[k], s1[k], err_msg=k)


def test_train_one_batch_uses_the_layer_loss():
    m = zoo.create("mlp")
    assert isinstance(m.softmax_cross_entropy, layer.SoftMaxCrossEntropy)


@pytest.mark.parametrize("name", ["mlp", "cnn", "resnet8", "alexnet"])
def test_onnx_export_matches_forward(name, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    m = zoo.create(name, num_classes=10, num_channels=3)
    x, _ = _batch(2, 3, 32)
    m.compile([x], is_train=False)
    ref = m(x).to_numpy()
    path = tmp_path / f"{name}.onnx"
    sonnx.export_model(m, str(path), [x])
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x.to_numpy()})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_create_model_factories():
    from singa.zoo import alexnet, cnn, mlp, resnet, xceptionnet

    assert isinstance(cnn.create_model(num_classes=3), zoo.CNN)
    assert isinstance(mlp.create_model(), zoo.MLP)
    assert isinstance(alexnet.create_model(num_channels=3), zoo.AlexNet)
    assert isinstance(xceptionnet.create_model(num_channels=3), zoo.Xception)
    assert isinstance(resnet.create_model(depth=20), zoo.CifarResNet)
    assert resnet.create_model(depth=50).block is resnet.Bottleneck
    with pytest.raises(NotImplementedError):
        cnn.create_model(pretrained=True)
    with pytest.raises(ValueError, match="depth"):
        resnet.create_model(depth=19)


@pytest.mark.slow  # a learning-quality run: the longest test of the default suite otherwise
def test_train_cnn_example_learns(capsys):
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[2] / "examples" / "train_cnn.py"
    spec = importlib.util.spec_from_file_location("train_cnn_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    acc = example.main(["--steps", "30"])
    assert 0.4 < acc <= 1.0  # 10 classes: chance is 0.1
    assert "validation accuracy" in capsys.readouterr().out
