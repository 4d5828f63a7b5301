"""Mixed precision: float16 compute on float32 master weights, float32 operators,
dynamic loss scaling, graph == eager, checkpoints and ONNX."""

import functools

import numpy as np
import pytest

from singa import autograd, device, layer, model, opt, sonnx, tensor
from singa.model import precision
from singa.tensor import Tensor


class Net(model.Model):
    """conv -> BatchNorm -> relu -> pool -> linear (used twice: shared weights) -> linear."""

    def __init__(self):
        super().__init__()
        self.conv = layer.Conv2d(4, 3, padding=1)
        self.bn = layer.BatchNorm2d()
        self.pool = layer.MaxPool2d(2, 2)
        self.flat = layer.Flatten()
        self.hidden = layer.Linear(16)
        self.shared = layer.Linear(16)
        self.out = layer.Linear(3)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        y = self.pool(autograd.relu(self.bn(self.conv(x))))
        h = autograd.relu(self.hidden(self.flat(y)))
        h = autograd.relu(self.shared(autograd.relu(self.shared(h))))
        return self.out(h)

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


def batches(n=4, seed=1):
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal((8, 2, 6, 6)).astype(np.float32), rng.integers(0, 3, 8).astype(np.int32))
        for _ in range(n)
    ]


def build(prec="mixed", graph=False, sequential=False, optimizer=None, seed=0):
    dev = device.get_default_device()
    dev.set_rand_seed(seed)
    m = Net()
    m.set_optimizer(optimizer or opt.SGD(0.05, momentum=0.9))
    tx = Tensor((8, 2, 6, 6), dev)
    ty = Tensor((8,), dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=graph, sequential=sequential, precision=prec)
    return m, tx, ty


def train(m, tx, ty, data):
    losses = []
    for x, y in data:
        tx.copy_from_numpy(x)
        ty.copy_from_numpy(y)
        _, loss = m(tx, ty)
        losses.append(loss.to_numpy().copy())
    return losses


def states(m):
    return {n: t.to_numpy().copy() for n, t in m.get_states().items()}


def assert_bitwise(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes(), k


# ----- the policy -----------------------------------------------------------------------------
def test_mixed_keeps_float32_masters_and_computes_in_float16():
    m, tx, ty = build()
    assert all(t.dtype == np.float32 for t in m.get_states().values())
    tx.copy_from_numpy(batches(1)[0][0])
    ty.copy_from_numpy(batches(1)[0][1])
    out, loss = m(tx, ty)
    assert out.dtype == np.float16  # computed in float16
    assert loss.dtype == np.float32  # the loss is a float32 operator
    assert all(t.dtype == np.float32 for t in m.get_states().values())  # masters restored
    assert isinstance(m.optimizer.loss_scaler, opt.LossScaler)
    assert m.optimizer.get_states(m.get_params())["slots"]["conv.W/momentum"].dtype == np.float32
    m.eval()
    assert m(tx).dtype == np.float16
    assert all(t.dtype == np.float32 for t in m.get_states().values())


def test_float32_operators_compute_in_float32():
    x = Tensor(
        (2, 3), dtype=tensor.float16, data=[[1000.0, 0.0, -1000.0], [3.0, 2.0, 1.0]], requires_grad=False
    )
    y = Tensor(data=np.array([0, 2], np.int32), requires_grad=False)
    with precision.autocast("mixed"):
        loss = autograd.softmax_cross_entropy(x, y)
        sm = autograd.softmax(x)
    want = autograd.softmax_cross_entropy(Tensor(data=x.data.astype(np.float32), requires_grad=False), y)
    assert loss.dtype == np.float32 and sm.dtype == np.float16
    np.testing.assert_array_equal(loss.to_numpy(), want.to_numpy())
    # in float16 the same loss is computed with float16 rounding (and differs)
    assert autograd.softmax_cross_entropy(x, y).dtype == np.float16


def test_batchnorm_statistics_stay_float32_and_are_updated():
    m, tx, ty = build()
    before = m.bn.running_mean.to_numpy().copy()
    train(m, tx, ty, batches(1))
    assert m.bn.running_mean.dtype == np.float32 and m.bn.scale.dtype == np.float32
    assert not np.array_equal(before, m.bn.running_mean.to_numpy())


def test_one_cast_per_parameter_per_step_whatever_the_uses():
    m, tx, ty = build(graph=True)
    x, y = batches(1)[0]
    tx.copy_from_numpy(x)
    ty.copy_from_numpy(y)
    m(tx, ty)
    ((graph, _),) = m._graphs.values()
    casts = [n for n in graph.source.splitlines() if "= f" in n]
    ns_casts = sum(
        1
        for k, v in _namespace(graph).items()
        if isinstance(v, functools.partial) and v.func is precision._astype
    )
    cast_params = len(precision.compute_params(m))
    assert ns_casts == cast_params  # shared.W is used twice, cast once
    assert cast_params == len(m.get_params()) - 2  # BatchNorm's scale and bias stay float32
    assert casts


def test_products_share_one_float32_copy_of_a_parameter_on_the_cpu(monkeypatch):
    m, tx, ty = build()
    x, y = batches(1)[0]
    tx.copy_from_numpy(x)
    ty.copy_from_numpy(y)
    ups = []
    real = precision.Autocast._up

    def counting(self, t):
        out = real(self, t)
        ups.append((t, out))
        return out

    monkeypatch.setattr(precision.Autocast, "_up", counting)
    m(tx, ty)
    shared = [out for t, out in ups if t is m.shared.W]
    assert len(shared) == 2 and shared[0] is shared[1]  # used twice, copied once


def _namespace(graph):
    return graph._fn.__globals__


def test_autocast_outside_a_model_restores_the_parameters():
    w = Tensor(data=np.ones((3, 2), np.float32), requires_grad=True, stores_grad=True)
    master = w.data
    with precision.autocast("mixed", [w]) as scope:
        assert w.dtype == np.float16 and scope.masters[w] is master
    assert w.data is master


def test_unknown_precision_is_rejected_before_anything_changes():
    m, tx, _ = build(prec="float32")
    with pytest.raises(ValueError, match="precision must be one of"):
        m.compile([tx], precision="bfloat16")
    assert m.precision == "float32"


# ----- loss scaling ----------------------------------------------------------------------------
@pytest.mark.parametrize("graph", [False, True])
def test_an_overflow_skips_the_step_and_halves_the_scale(graph):
    m, tx, ty = build(graph=graph)
    data = batches(3)
    train(m, tx, ty, data[:1])
    scaler = m.optimizer.loss_scaler
    assert scaler.skipped_steps == 0 and scaler.scale == 2.0**16
    before = states(m)
    slots = m.optimizer.get_states(m.get_params())
    scaler.scale = 2.0**40  # loss * 2**40 overflows float16 in backward
    train(m, tx, ty, data[1:2])
    assert scaler.last_step_skipped and scaler.skipped_steps == 1
    assert scaler.scale == 2.0**39
    after = states(m)
    for k in m.get_params():
        assert before[k].tobytes() == after[k].tobytes(), k  # no update
    now = m.optimizer.get_states(m.get_params())
    assert now["param_steps"] == slots["param_steps"]
    assert now["step"] == slots["step"] + 1  # the schedule advances as in a torch loop
    for k, v in slots["slots"].items():
        assert v.tobytes() == now["slots"][k].tobytes()
    scaler.scale = 2.0**10
    train(m, tx, ty, data[2:3])
    assert not scaler.last_step_skipped and scaler.growth_tracker == 1


def test_the_scale_grows_after_growth_interval_good_steps():
    sgd = opt.SGD(0.05)
    sgd.loss_scaler = opt.LossScaler(init_scale=4.0, growth_interval=3)
    m, tx, ty = build(optimizer=sgd, prec="float16")  # float16 drops a foreign scaler
    assert sgd.loss_scaler is None
    m, tx, ty = build(optimizer=opt.SGD(0.05))
    m.optimizer.loss_scaler = opt.LossScaler(init_scale=4.0, growth_interval=3)
    train(m, tx, ty, batches(3))
    assert m.optimizer.loss_scaler.scale == 8.0 and m.optimizer.loss_scaler.growth_tracker == 0


def test_scaling_rescues_gradients_that_underflow_in_float16():
    """d loss / d w = 1e-6 * x = 1e-8 is 0 in float16; with the loss scaled by 2**14
    the float16 gradient survives, and unscaled in float32 it is 1e-8."""
    w = Tensor(data=np.ones((4,), np.float32), requires_grad=True, stores_grad=True)
    x = Tensor(data=np.full((4,), 0.01, np.float32), requires_grad=False)
    small = Tensor(data=np.float32(1e-6), requires_grad=False)
    grads = {}
    for s in (1.0, 2.0**14):
        autograd.training = True
        try:
            with precision.autocast("mixed", [w]) as scope:
                h = autograd.reduce_sum(autograd.mul(w, scope.cast_input(x)))
                loss = autograd.mul(autograd.cast(h, np.float32), small)
                scope.restore_masters()
                scaled = autograd.mul(loss, Tensor(data=np.float32(s), requires_grad=False))
                g = dict(autograd.backward(scaled))[w].data
        finally:
            autograd.training = False
        assert g.dtype == np.float16
        grads[s] = g.astype(np.float32) / np.float32(s)
    assert not grads[1.0].any()
    np.testing.assert_allclose(grads[2.0**14], 1e-8, rtol=1e-3)


def test_loss_scaler_validates_and_round_trips_its_state():
    with pytest.raises(ValueError, match="growth_factor"):
        opt.LossScaler(growth_factor=1.0)
    with pytest.raises(ValueError, match="backoff_factor"):
        opt.LossScaler(backoff_factor=1.5)
    with pytest.raises(ValueError, match="growth_interval"):
        opt.LossScaler(growth_interval=0)
    a = opt.LossScaler()
    assert (a.scale, a.backoff_factor, a.growth_factor, a.growth_interval) == (2.0**16, 0.5, 2.0, 2000)
    a.update(True)
    a.update(False)
    b = opt.LossScaler()
    b.set_states(a.get_states())
    assert b.get_states() == a.get_states() and b.scale == 2.0**15 and b.growth_tracker == 1
    with pytest.raises(ValueError, match="scale must be a number"):
        b.set_states({**a.get_states(), "scale": -1})
    assert b.scale == 2.0**15


def test_all_ranks_agree_through_the_all_reduce_hook():
    calls = []

    def any_rank(found):
        calls.append(found)
        return True  # another rank overflowed

    m, tx, ty = build()
    m.optimizer.loss_scaler.all_reduce_flag = any_rank
    before = states(m)
    train(m, tx, ty, batches(1))
    assert calls == [False] and m.optimizer.loss_scaler.skipped_steps == 1
    for k in m.get_params():
        assert before[k].tobytes() == states(m)[k].tobytes()


# ----- graph == eager ---------------------------------------------------------------------------
@pytest.mark.parametrize("prec", ["mixed", "float16"])
@pytest.mark.parametrize("sequential", [False, True])
def test_graph_replay_equals_eager_bitwise(prec, sequential):
    data = batches(4)
    runs = []
    for graph in (False, True):
        m, tx, ty = build(prec, graph=graph, sequential=sequential, optimizer=opt.Adam(0.01))
        losses = train(m, tx, ty, data)
        runs.append((states(m), losses, m.optimizer.get_states(m.get_params())))
    assert_bitwise(runs[0][0], runs[1][0])
    for a, b in zip(runs[0][1], runs[1][1]):
        assert a.tobytes() == b.tobytes()
    assert runs[0][2].get("loss_scaler") == runs[1][2].get("loss_scaler")


def test_graph_replay_follows_a_skipped_step_like_eager():
    data = batches(4)
    runs = []
    for graph in (False, True):
        m, tx, ty = build(graph=graph)
        train(m, tx, ty, data[:2])
        m.optimizer.loss_scaler.scale = 2.0**40
        train(m, tx, ty, data[2:])
        runs.append((states(m), m.optimizer.loss_scaler.get_states()))
    assert_bitwise(runs[0][0], runs[1][0])
    assert runs[0][1] == runs[1][1] and runs[0][1]["skipped_steps"] >= 1


# ----- SINGA's pure float16 form ----------------------------------------------------------------
def test_singa_pure_float16_form_with_optimizer_dtype():
    dev = device.get_default_device()
    dev.set_rand_seed(0)
    m = Net()
    m.set_optimizer(opt.SGD(0.05, momentum=0.9, dtype=tensor.float16))
    tx = Tensor((8, 2, 6, 6), dev, tensor.float16)
    ty = Tensor((8,), dev, tensor.int32)
    m.compile([tx], is_train=True)
    assert m.precision == "float32" and m.optimizer.loss_scaler is None
    x, y = batches(1)[0]
    tx.copy_from_numpy(x.astype(np.float16))
    ty.copy_from_numpy(y)
    out, loss = m(tx, ty)
    assert out.dtype == loss.dtype == np.float16  # every operator in float16, as SINGA
    assert all(t.dtype == np.float16 for t in m.get_states().values())
    with pytest.raises(ValueError, match="pure float16"):
        m.compile([tx], precision="mixed")
    assert m.precision == "float32"


def test_optimizer_dtype_rejects_a_parameter_of_another_dtype():
    sgd = opt.SGD(0.1, dtype=tensor.float16)
    w = Tensor(data=np.ones(3, np.float32), requires_grad=True, stores_grad=True)
    with pytest.raises(ValueError, match="dtype=float16"):
        sgd.update(w, np.ones(3, np.float32))
    with pytest.raises(ValueError, match="dtype must be"):
        opt.SGD(0.1, dtype=np.int32)


def test_float16_policy_stores_everything_in_float16():
    m, tx, ty = build("float16")
    assert all(t.dtype == np.float16 for t in m.get_states().values())
    losses = train(m, tx, ty, batches(2))
    assert losses[0].dtype == np.float32  # the loss is computed in float32
    assert all(t.dtype == np.float16 for t in m.get_states().values())


def test_mixed_trains_like_float32():
    data = batches(6) * 3
    final = {}
    for prec in ("float32", "mixed"):
        m, tx, ty = build(prec)
        final[prec] = train(m, tx, ty, data)
    mixed, full = np.concatenate(final["mixed"]), np.concatenate(final["float32"])
    assert mixed[-6:].mean() < mixed[:6].mean()
    np.testing.assert_allclose(mixed, full, atol=2e-3)
    assert not np.array_equal(mixed, full)  # it did compute in float16


# ----- checkpoints ------------------------------------------------------------------------------
@pytest.mark.parametrize("graph", [False, True])
def test_mixed_resume_is_bitwise_exact_with_the_scaler_state(tmp_path, graph):
    data = batches(5)
    m, tx, ty = build(graph=graph, optimizer=opt.Adam(0.01))
    train(m, tx, ty, data[:2])
    m.optimizer.loss_scaler.scale = 2.0**40  # the next step overflows: scale 2**39, one skip
    train(m, tx, ty, data[2:3])
    path = str(tmp_path / "mixed.zip")
    m.save_states(path, aux_states={"epoch": 1})
    train(m, tx, ty, data[3:])
    want = states(m), m.optimizer.get_states(m.get_params())

    from singa import checkpoint

    stored = checkpoint.read(path).optimizer["states"]["loss_scaler"]
    assert stored["precision"] == "mixed" and stored["scale"] == 2.0**39 and stored["skipped_steps"] == 1

    r, rx, ry = build(graph=graph, optimizer=opt.Adam(0.01), seed=5)
    assert r.load_states(path)["epoch"] == 1
    assert r.optimizer.loss_scaler.scale == 2.0**39
    train(r, rx, ry, data[3:])
    assert_bitwise(want[0], states(r))
    got = r.optimizer.get_states(r.get_params())
    assert got["loss_scaler"] == want[1]["loss_scaler"] and got["step"] == want[1]["step"]


def test_float32_checkpoints_load_into_mixed_models_and_back(tmp_path):
    data = batches(2)
    f32, tx, ty = build("float32")
    train(f32, tx, ty, data)
    path32 = str(tmp_path / "f32.zip")
    f32.save_states(path32)
    mixed, mx, my = build("mixed", seed=3)
    mixed.load_states(path32)
    assert_bitwise(states(f32), states(mixed))
    assert mixed.optimizer.loss_scaler.scale == 2.0**16  # none stored: the default
    train(mixed, mx, my, data)
    path_mixed = str(tmp_path / "mixed.zip")
    mixed.save_states(path_mixed)
    back, _, _ = build("float32", seed=4)
    back.load_states(path_mixed)  # the scaler state is ignored by a float32 model
    assert_bitwise(states(mixed), states(back))
    assert back.optimizer.loss_scaler is None


def test_a_bad_scaler_state_changes_nothing():
    m, tx, ty = build()
    train(m, tx, ty, batches(1))
    names = m.get_params()
    st = m.optimizer.get_states(names)
    st["loss_scaler"] = {**st["loss_scaler"], "growth_tracker": -1}
    before = m.optimizer.get_states(names)
    with pytest.raises(ValueError, match="growth_tracker"):
        m.optimizer.set_states(st, names)
    assert m.optimizer.get_states(names)["step"] == before["step"]


# ----- ONNX -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [None, tensor.float16])
def test_onnx_export_of_a_mixed_model_agrees_with_onnxruntime(tmp_path, dtype):
    ort = pytest.importorskip("onnxruntime")
    m, tx, ty = build()
    train(m, tx, ty, batches(2))
    m.eval()
    x = batches(1, seed=7)[0][0]
    tx.copy_from_numpy(x)
    ours = m(tx).to_numpy().astype(np.float32)  # float16 compute
    path = str(tmp_path / "m.onnx")
    proto = sonnx.export_model(m, path, [tx], dtype=dtype)
    want = np.float16 if dtype is not None else np.float32
    assert {i.data_type for i in proto.graph.initializer} == {1 if dtype is None else 10}
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {sess.get_inputs()[0].name: x.astype(want)})
    assert got.dtype == want
    np.testing.assert_allclose(got.astype(np.float32), ours, rtol=2e-2, atol=2e-2)
    assert all(t.dtype == np.float32 for t in m.get_states().values())  # the model is as it was


class Scale(model.Model):
    """loss = mean(w * x), so d loss / d w_i = x_i / 4 (constant)."""

    def __init__(self):
        super().__init__()
        self.w = Tensor(data=np.ones((4,), np.float32), requires_grad=True, stores_grad=True)

    def forward(self, x):
        return autograd.mul(self.w, x)

    def train_one_batch(self, x):
        loss = autograd.reduce_mean(self.forward(x))
        self.optimizer(loss)
        return loss


@pytest.mark.parametrize("graph", [False, True])
def test_updates_below_a_float16_ulp_are_lost_in_float16_and_kept_by_mixed(graph):
    """lr * grad = 1e-5 is below half a float16 ulp of 1.0 (4.9e-4): pure float16
    never moves w, the float32 master of mixed moves by 100 * 1e-5."""
    result = {}
    for prec in ("float16", "mixed"):
        m = Scale()
        m.set_optimizer(opt.SGD(0.1))
        tx = Tensor(data=np.full((4,), 4e-4, np.float32), requires_grad=False)
        m.compile([tx], use_graph=graph, precision=prec)
        for _ in range(100):
            m(tx)
        result[prec] = m.w.to_numpy().astype(np.float64)
    assert np.all(result["float16"] == 1.0)
    np.testing.assert_allclose(result["mixed"], 1.0 - 100 * 0.1 * 1e-4, rtol=1e-5)
