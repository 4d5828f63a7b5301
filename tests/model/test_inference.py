"""The inference path: evaluation replays with eval-only fusions (singa.model.inference)."""

import gc
import weakref

import numpy as np
import pytest

from singa import autograd, layer, model, opt, tensor
from singa.model import fused, inference
from singa.model.model import MAX_GRAPHS
from singa.tensor import Tensor
from singa.zoo import cnn, resnet


def randomize_batchnorm(m, seed=1):
    """Running statistics, scales and shifts away from their defaults (as after
    training), so that folding BatchNorm has something to fold."""
    rng = np.random.default_rng(seed)
    for name, t in m.get_states().items():
        owner, _, kind = name.rpartition(".")
        if "bn" not in owner.rsplit(".", 1)[-1]:
            continue
        if kind in ("running_var", "scale"):
            t.copy_from_numpy((rng.random(t.shape) * 0.8 + 0.6).astype(t.dtype))
        elif kind in ("running_mean", "bias"):
            t.copy_from_numpy((rng.standard_normal(t.shape) * 0.1).astype(t.dtype))


def compiled(make, shape, seed=0):
    rng = np.random.default_rng(seed)
    x = Tensor(data=rng.standard_normal(shape).astype(np.float32))
    m = make()
    m.compile([x], is_train=False, use_graph=False)
    randomize_batchnorm(m)
    m.eval()
    return m, x


def eager_eval(m, x):
    mode = (m.graph_mode, m.sequential)
    m.graph_mode = False
    try:
        return m(x).to_numpy()
    finally:
        m.graph_mode, m.sequential = mode


def eval_graph(m):
    """The (only) evaluation graph of ``m``."""
    (g,) = [g for k, (g, _) in m._graphs.items() if k[0] is False]
    return g


class LinearBN(model.Model):
    """Linear -> BatchNorm over (N, C) -> ReLU -> Linear."""

    def __init__(self):
        super().__init__()
        self.fc1 = layer.Linear(6)
        self.bn = layer.BatchNorm2d()
        self.fc2 = layer.Linear(3)

    def forward(self, x):
        return self.fc2(autograd.relu(self.bn(self.fc1(x))))


# ----- exact fusions: bitwise equal to eager evaluation -----------------------------------------
@pytest.mark.parametrize("sequential", [False, True])
def test_exact_fusions_replay_bitwise_eager(sequential):
    m, x = compiled(lambda: cnn.CNN(num_classes=4, kernels=(3, 5), hidden=7), (3, 1, 16, 16))
    want = eager_eval(m, x)
    m.graph(True, sequential)
    for _ in range(3):
        np.testing.assert_array_equal(m(x).to_numpy(), want)
    g = eval_graph(m)
    assert g.fusions == {"conv+relu": 2, "activated+maxpool": 2, "matmul+bias": 2, "linear+relu": 1}
    assert not g.folded
    assert sum(isinstance(f, fused.ConvForward) for f in g._fn.__globals__.values()) == 2


class ConvPool(model.Model):
    """conv -> [relu] -> max-pool (``padding`` / ``ceil``: kinds that are not fused),
    -> relu, twice (a one-channel input takes the kernel-major path first)."""

    def __init__(self, relu_first=True, pool=(3, 2), padding=0, ceil=False):
        super().__init__()
        self.relu_first = relu_first
        self.conv1 = layer.Conv2d(5, 3, padding=1)
        self.conv2 = layer.Conv2d(6, 3, padding=1)
        self.pool = pool
        self.padding = padding
        self.ceil = ceil

    def _pool(self, y):
        return autograd.max_pool_2d(y, self.pool[0], self.pool[1], self.padding, ceil_mode=self.ceil)

    def forward(self, x):
        for conv in (self.conv1, self.conv2):
            y = conv(x)
            x = autograd.relu(self._pool(autograd.relu(y) if self.relu_first else y))
        return x


@pytest.mark.parametrize(
    "kind, fusions",
    [
        ({}, {"conv+relu": 2, "activated+maxpool": 2}),
        ({"pool": (2, 2)}, {"conv+relu": 2, "activated+maxpool": 2}),
        ({"relu_first": False}, {"conv+maxpool": 2}),
        ({"padding": 1}, {"conv+relu": 2}),
        ({"ceil": True}, {"conv+relu": 2}),
    ],
)
def test_max_pool_fused_into_the_convolution_stays_bitwise(kind, fusions):
    m, x = compiled(lambda: ConvPool(**kind), (3, 1, 11, 11))
    want = eager_eval(m, x)
    assert (want == 0).any() and (want > 0).any()
    m.graph(True)
    for _ in range(2):
        np.testing.assert_array_equal(m(x).to_numpy(), want)
    assert eval_graph(m).fusions == fusions


class SkinnyMLP(model.Model):
    """A linear layer with few outputs on a long batch: a product that the BLAS thread
    policy (singa.kernels.blas_threads) runs on one thread."""

    def __init__(self):
        super().__init__()
        self.fc1 = layer.Linear(8)
        self.fc2 = layer.Linear(3)

    def forward(self, x):
        return self.fc2(autograd.relu(self.fc1(x)))


def test_fused_linear_runs_on_the_threads_of_matmul_and_stays_bitwise(monkeypatch):
    from singa.kernels import blas_threads

    shapes = []
    real = blas_threads.threads_for
    monkeypatch.setattr(
        blas_threads, "threads_for", lambda m, n, k: shapes.append((m, n, k)) or real(m, n, k)
    )
    m, x = compiled(SkinnyMLP, (2048, 600))
    want = eager_eval(m, x)
    eager_products = list(shapes)
    shapes.clear()
    m.graph(True)
    for _ in range(2):
        np.testing.assert_array_equal(m(x).to_numpy(), want)
    assert eval_graph(m).fusions == {"matmul+bias": 2, "linear+relu": 1}
    assert real(2048, 8, 600) == 1  # the first product is one the policy limits
    assert shapes[-2:] == eager_products[-2:] == [(2048, 8, 600), (2048, 3, 8)]


def test_exact_fusions_read_parameters_live():
    m, x = compiled(lambda: cnn.CNN(num_classes=4, kernels=(3, 5), hidden=7), (2, 1, 16, 16))
    m.graph(True)
    m(x)
    m.conv1.W.data *= 0.5  # in place, behind the model's back: an exact graph sees it
    np.testing.assert_array_equal(m(x).to_numpy(), eager_eval(m, x))


def test_eval_replay_keeps_no_backward_caches():
    m, x = compiled(lambda: resnet.resnet8(num_classes=3, num_channels=2), (2, 2, 8, 8))
    m.graph(True, fold_batchnorm=True)
    m(x)
    m(x)
    g = eval_graph(m)
    ops = [v for v in g._fn.__globals__.values() if isinstance(v, autograd.Operation)]
    ops += [v.conv for v in g._fn.__globals__.values() if isinstance(v, fused.ConvForward)]
    assert ops and all(op.cache is None and not op.requires_grad for op in ops)


# ----- folding: close to eager evaluation, not bitwise -------------------------------------------
def test_folded_resnet_matches_eager_to_float32_rounding():
    m, x = compiled(lambda: resnet.resnet8(num_classes=5, num_channels=3), (4, 3, 8, 8))
    want = eager_eval(m, x)
    m.graph(True, fold_batchnorm=True)
    got = [m(x).to_numpy() for _ in range(3)]
    assert np.ptp(want, axis=0).min() > 1e-3  # the samples' logits differ: a real test
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    np.testing.assert_array_equal(got[1], got[2])  # replays are deterministic
    g = eval_graph(m)
    bns = sum(name.endswith("running_mean") for name in m.get_states())
    assert g.folded and g.fusions["conv+batchnorm"] == bns
    assert g.fusions["conv+relu"] >= 1
    blocks = sum(name.endswith(".bn2.running_mean") for name in m.get_states())  # conv-bn-add-relu each
    assert g.fusions["conv+add"] == g.fusions["residual+relu"] == blocks
    assert not any(isinstance(f, autograd.Add) for f in g._fn.__globals__.values())


@pytest.mark.parametrize("sequential", [False, True])
def test_unfolded_resnet_fuses_batchnorm_live_and_stays_bitwise(sequential):
    """Without folding, BatchNorm, the shortcut and ReLU run in the convolutions'
    slices, bit for bit as eager evaluation, reading the statistics on every call."""
    m, x = compiled(lambda: resnet.resnet8(num_classes=5, num_channels=3), (3, 3, 8, 8))
    m.graph(True, sequential)
    for _ in range(2):
        assert m(x).to_numpy().tobytes() == eager_eval(m, x).tobytes()
    g = eval_graph(m)
    bns = sum(name.endswith("running_mean") for name in m.get_states())
    blocks = sum(name.endswith(".bn2.running_mean") for name in m.get_states())
    assert not g.folded and g.fusions["conv+batchnorm/live"] == bns
    assert g.fusions["conv+add"] == g.fusions["residual+relu"] == blocks
    m.layer1[0].bn2.running_mean.data += 0.25  # in place, behind the model's back
    assert m(x).to_numpy().tobytes() == eager_eval(m, x).tobytes()


class TwoBatchNorms(model.Model):
    """conv -> bn -> bn -> relu: only the first BatchNorm joins the convolution."""

    def __init__(self):
        super().__init__()
        self.conv = layer.Conv2d(4, 3, padding=1)
        self.bn1 = layer.BatchNorm2d()
        self.bn2 = layer.BatchNorm2d()

    def forward(self, x):
        return autograd.relu(self.bn2(self.bn1(self.conv(x))))


def test_a_second_batchnorm_after_a_live_one_runs_as_traced():
    m, x = compiled(TwoBatchNorms, (2, 3, 6, 6))
    want = eager_eval(m, x)
    m.graph(True)
    for _ in range(2):
        assert m(x).to_numpy().tobytes() == want.tobytes()
    assert eval_graph(m).fusions == {"conv+batchnorm/live": 1}
    folded, _ = compiled(TwoBatchNorms, (2, 3, 6, 6))
    folded.graph(True, fold_batchnorm=True)  # folding takes both, and the ReLU after them
    np.testing.assert_allclose(folded(x).to_numpy(), eager_eval(folded, x), rtol=1e-5, atol=1e-5)
    assert eval_graph(folded).fusions == {"conv+batchnorm": 2, "conv+relu": 1}


def test_live_batchnorm_on_float16_runs_the_operators_as_traced():
    from singa.autograd.conv import Conv2d
    from singa.autograd.normalization import BatchNorm2d

    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float16)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float16)
    stats = [(rng.random(4) + 0.5).astype(np.float16) for _ in range(4)]
    conv, bn = Conv2d((3, 3), pads=(1, 1, 1, 1)), BatchNorm2d(training=False)
    conv.requires_grad = bn.requires_grad = False
    want = np.maximum(bn.forward(conv.forward(x, w), *stats), 0)
    got = fused.ConvForward(conv, True, bias=False, bn=bn)(x, w, *stats)
    assert got.dtype == np.float16 and got.tobytes() == np.ascontiguousarray(want).tobytes()


class Residual(model.Model):
    """conv -> relu -> conv, plus a shortcut added in the given operand order, ->
    relu; ``shortcut="row"`` adds a broadcast (1, C, 1, W) tensor instead."""

    def __init__(self, shortcut="second"):
        super().__init__()
        self.shortcut = shortcut
        self.conv1 = layer.Conv2d(4, 3, padding=1)
        self.conv2 = layer.Conv2d(4, 3, padding=1)

    def forward(self, x):
        y = self.conv2(autograd.relu(self.conv1(x)))
        if self.shortcut == "first":
            y = autograd.add(x, y)
        elif self.shortcut == "row":
            y = autograd.add(y, autograd.reduce_mean(x, axes=[0, 2], keepdims=1))
        else:
            y = autograd.add(y, x)
        return autograd.relu(y)


@pytest.mark.parametrize("sequential", [False, True])
@pytest.mark.parametrize("shortcut", ["second", "first", "row"])
def test_residual_add_and_relu_fused_into_the_convolution_stay_bitwise(shortcut, sequential):
    m, x = compiled(lambda: Residual(shortcut), (3, 4, 6, 6))
    want = eager_eval(m, x)
    m.graph(True, sequential)
    for _ in range(3):
        np.testing.assert_array_equal(m(x).to_numpy(), want)
    assert (want == 0).any() and (want > 0).any()
    g = eval_graph(m)
    assert g.fusions == {"conv+relu": 1, "conv+add": 1, "residual+relu": 1}
    (fn,) = [f for f in g._fn.__globals__.values() if isinstance(f, fused.ConvForward) and f.add is not None]
    assert fn.residual_first == (shortcut == "first")


def test_linear_followed_by_batchnorm_is_folded():
    rng = np.random.default_rng(3)
    x = Tensor(data=rng.standard_normal((5, 4)).astype(np.float32))
    m = LinearBN()
    m.compile([x], is_train=False)
    randomize_batchnorm(m)
    for name in ("running_var", "scale"):
        getattr(m.bn, name).copy_from_numpy((rng.random(6) + 0.5).astype(np.float32))
    for name in ("running_mean", "bias"):
        getattr(m.bn, name).copy_from_numpy((rng.standard_normal(6) * 0.1).astype(np.float32))
    m.eval()
    want = eager_eval(m, x)
    m.graph(True, fold_batchnorm=True)
    m(x)
    np.testing.assert_allclose(m(x).to_numpy(), want, rtol=1e-5, atol=1e-6)
    assert eval_graph(m).fusions == {"matmul+bias": 2, "linear+batchnorm": 1, "linear+relu": 1}


def test_fold_setting_change_never_replays_the_other_graph():
    m, x = compiled(lambda: resnet.resnet8(num_classes=3, num_channels=2), (2, 2, 8, 8))
    want = eager_eval(m, x)
    m.graph(True, fold_batchnorm=True)
    m(x)
    m.graph(True, fold_batchnorm=False)
    np.testing.assert_array_equal(m(x).to_numpy(), want)


# ----- invalidation --------------------------------------------------------------------------------
def folded_model(shape=(3, 2, 8, 8)):
    m, x = compiled(lambda: resnet.resnet8(num_classes=3, num_channels=2), shape)
    m.graph(True, fold_batchnorm=True)
    return m, x


def close(a, b):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * np.abs(b).max())


def test_new_input_shape_gets_its_own_graph():
    m, x = folded_model()
    x2 = Tensor(data=np.random.default_rng(5).standard_normal((1, 2, 12, 12)).astype(np.float32))
    for _ in range(2):
        close(m(x).to_numpy(), eager_eval(m, x))
        close(m(x2).to_numpy(), eager_eval(m, x2))
    assert sum(1 for k in m._graphs if k[0] is False) == 2


def test_set_states_and_load_states_rebuild_folded_weights(tmp_path):
    m, x = folded_model()
    before = m(x).to_numpy()
    saved = {k: v.to_numpy().copy() for k, v in m.get_states().items()}
    m.save_states(str(tmp_path / "ck.zip"))
    changed = {k: (v * 0.7 + 0.1).astype(v.dtype) for k, v in saved.items()}
    m.set_states(changed)
    after_set = m(x).to_numpy()
    close(after_set, eager_eval(m, x))
    assert not np.allclose(after_set, before)
    m.load_states(str(tmp_path / "ck.zip"))
    close(m(x).to_numpy(), before)


def test_training_and_optimizer_steps_rebuild_folded_weights():
    m, x = folded_model()
    m.set_optimizer(opt.SGD(lr=0.1, momentum=0.9))
    y = Tensor(data=np.array([0, 1, 2], np.int32), requires_grad=False)
    m(x)
    m.train()
    m(x, y)
    m.eval()
    close(m(x).to_numpy(), eager_eval(m, x))
    # an optimizer step outside train_one_batch (its step counter advances)
    p = m.conv1.W
    m.optimizer.update(p, tensor.from_numpy(np.ones(p.shape, np.float32)))
    m.optimizer.step()
    close(m(x).to_numpy(), eager_eval(m, x))


def test_reset_graph_after_writing_into_a_parameter():
    m, x = folded_model()
    m(x)
    m.conv1.W.data *= 0.5  # behind the model's back: folded weights are a snapshot
    m.reset_graph()
    close(m(x).to_numpy(), eager_eval(m, x))


def test_train_drops_folded_graphs_and_they_are_freed():
    m, x = folded_model()
    m(x)
    ref = weakref.ref(eval_graph(m))
    m.train()
    gc.collect()
    assert ref() is None
    assert not any(k[0] is False for k in m._graphs)


def test_graphs_per_model_stay_bounded():
    m, _ = folded_model()
    rng = np.random.default_rng(0)
    for n in range(1, MAX_GRAPHS + 5):
        m(Tensor(data=rng.standard_normal((n, 2, 8, 8)).astype(np.float32)))
    assert len(m._graphs) == MAX_GRAPHS


def test_rule_table_names_known_levels():
    assert {r.level for r in inference.RULES} <= set(inference.LEVELS)
    assert len({r.name for r in inference.RULES}) == len(inference.RULES)


# ----- Winograd convolutions: a fold rewrite ---------------------------------------------------------
class Convs3x3(model.Model):
    """Two 3x3 "same" convolutions of 8 channels with a ReLU between: no BatchNorm, so
    only the Winograd rewrite makes the folded graph differ from the exact one."""

    def __init__(self):
        super().__init__()
        self.conv1 = layer.Conv2d(8, 3, padding=1)
        self.conv2 = layer.Conv2d(8, 3, padding=1)

    def forward(self, x):
        return self.conv2(autograd.relu(self.conv1(x)))


def test_folding_runs_3x3_convolutions_as_winograd_and_snapshots_their_filters():
    m, x = compiled(Convs3x3, (2, 8, 12, 12))
    want = eager_eval(m, x)
    m.graph(True, fold_batchnorm=True)
    m(x)  # traced (evaluated eagerly)
    got = m(x).to_numpy()  # replayed
    g = eval_graph(m)
    assert g.fusions == {"conv/winograd": 2, "conv+relu": 1} and g.folded
    convs = [f for f in g._fn.__globals__.values() if isinstance(f, fused.ConvForward)]
    assert len(convs) == 2 and all(f.filters is not None for f in convs)
    close(got, want)
    assert not np.array_equal(got, want)  # other roundings: the Winograd path ran
    # the filters are a snapshot: new weights through set_params rebuild the graph
    params = {k: v.to_numpy() for k, v in m.get_params().items()}
    m.set_params({**params, "conv1.W": params["conv1.W"] * -0.5})
    close(m(x).to_numpy(), eager_eval(m, x))


def test_without_folding_convolutions_stay_exact():
    m, x = compiled(Convs3x3, (2, 8, 12, 12))
    m.graph(True)
    m(x)
    g = eval_graph(m)
    assert "conv/winograd" not in g.fusions and not g.folded
    np.testing.assert_array_equal(m(x).to_numpy(), eager_eval(m, x))


def test_a_winograd_convolution_falls_back_for_an_input_too_small_for_a_tile():
    """An input whose output is under 4x4 runs the column product: the bits of eager
    evaluation (the filters are transformed all the same; the graph does not know the
    shapes when it decides)."""
    m, x = compiled(Convs3x3, (2, 8, 12, 12))
    m.graph(True, fold_batchnorm=True)
    small = Tensor(data=np.random.default_rng(4).standard_normal((1, 8, 3, 3)).astype(np.float32))
    m(small)
    np.testing.assert_array_equal(m(small).to_numpy(), eager_eval(m, small))
