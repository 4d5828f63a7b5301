"""Graph mode: bitwise equal to eager execution, retracing, randomness, schedules."""

import re
import weakref

import numpy as np
import pytest
from model_helpers import CNN, MLP, LayerCNN, LayerMLP, assert_same, batches, run

from singa import autograd, device, opt
from singa.autograd import engine
from singa.tensor import Tensor

OPTS = {
    "sgd": lambda: opt.SGD(0.1, momentum=0.9, weight_decay=0.01),
    "nesterov-clip": lambda: opt.SGD(0.1, momentum=0.9, nesterov=True, clip_norm=0.5),
    "adam": lambda: opt.Adam(0.01, weight_decay=0.01, amsgrad=True),
    "adamw": lambda: opt.AdamW(0.01),
    "rmsprop": lambda: opt.RMSProp(0.01, momentum=0.5, centered=True, weight_decay=0.1),
    "adagrad": lambda: opt.AdaGrad(0.1, weight_decay=0.1),
}


@pytest.mark.parametrize("sequential", [True, False])
@pytest.mark.parametrize("name", sorted(OPTS))
def test_mlp_graph_is_bitwise_eager(name, sequential):
    data = batches(8, (16, 6), 3)
    eager = run(MLP, OPTS[name], data, use_graph=False)
    graph = run(MLP, OPTS[name], data, use_graph=True, sequential=sequential)
    assert_same(eager, graph)
    assert len(graph[3]._graphs) == 1  # traced once, replayed 7 times
    assert not np.array_equal(eager[2]["w0"], MLP().w0.to_numpy())  # it trained


@pytest.mark.parametrize("sequential", [True, False])
def test_cnn_with_batchnorm_and_dropout_is_bitwise_eager(sequential):
    data = batches(6, (4, 2, 8, 8), 3)
    eager = run(CNN, OPTS["sgd"], data, use_graph=False)
    graph = run(CNN, OPTS["sgd"], data, use_graph=True, sequential=sequential)
    assert_same(eager, graph)
    assert not np.array_equal(graph[2]["running_mean"], 0)  # BN statistics were updated in place


def test_last_smaller_batch_and_new_tensors_retrace():
    data = batches(7, (8, 2, 8, 8), 3, sizes=[8, 8, 8, 5, 8, 5, 3])
    make = lambda: opt.Adam(0.01)  # noqa: E731
    eager = run(CNN, make, data, use_graph=False)
    graph = run(CNN, make, data, use_graph=True)
    assert_same(eager, graph)
    assert len(graph[3]._graphs) == 3  # batch sizes 8, 5 and 3
    fresh = run(CNN, make, data, use_graph=True, placeholder=False)
    assert_same(eager, fresh)


def test_scheduler_and_manual_lr_changes_take_effect_in_replays():
    data = batches(8, (16, 6), 3)

    def make():
        return opt.SGD(
            lr=opt.ExponentialDecay(0.5, decay_steps=2, decay_rate=0.5, warmup_steps=2), momentum=0.5
        )

    def hook(i, m):
        if i == 5:
            m.optimizer.lr = opt.Constant(0.3)

    eager = run(MLP, make, data, use_graph=False, hook=hook)
    graph = run(MLP, make, data, use_graph=True, hook=hook)
    assert_same(eager, graph)
    assert graph[3].optimizer.steps == 8
    # the schedule really changed the steps: a constant rate gives other parameters
    const = run(MLP, lambda: opt.SGD(0.5, momentum=0.5), data, use_graph=True)
    assert not np.array_equal(const[2]["w0"], graph[2]["w0"])


def test_dropout_draws_fresh_masks_on_every_replay():
    device.get_default_device().set_rand_seed(3)
    m = CNN(ratio=0.5)
    m.set_optimizer(opt.SGD(0.0))  # lr 0: parameters stay, only the masks change
    x = Tensor(data=np.random.default_rng(0).standard_normal((4, 2, 8, 8)).astype(np.float32))
    y = Tensor(data=np.zeros(4), dtype=np.int32, requires_grad=False)
    m.compile([x], use_graph=True)
    m.running_mean.set_value(0.0)
    outs = []
    for _ in range(3):
        m.running_mean.set_value(0.0)
        m.running_var.set_value(1.0)
        outs.append(m(x, y)[0].to_numpy())
    assert not np.array_equal(outs[1], outs[2]) and not np.array_equal(outs[0], outs[1])


def test_train_eval_switching_never_replays_the_wrong_graph():
    data = batches(6, (4, 2, 8, 8), 3)
    evals: dict = {False: [], True: []}

    for use_graph in (False, True):

        def hook(i, m, use_graph=use_graph):
            m.eval()
            x = Tensor(data=data[i][0])
            evals[use_graph].append(m(x).to_numpy())
            y = m(x)  # evaluation keeps no backward caches (a replay records nothing at all)
            assert y.creator is None or (y.creator.cache is None and not y.creator.requires_grad)
            m.train()

        res = run(CNN, OPTS["sgd"], data, use_graph=use_graph, hook=hook)
        if use_graph:
            graph = res
        else:
            eager = res
    assert_same(eager, graph)
    for a, b in zip(evals[False], evals[True]):
        np.testing.assert_array_equal(a, b)
    keys = {k[0] for k in graph[3]._graphs}
    assert keys == {True, False}


def test_replay_runs_no_autograd_bookkeeping(monkeypatch):
    data = batches(4, (16, 6), 3)
    calls = {"op": 0, "backward": 0}
    real_call = engine.Operation.__call__
    real_backward = engine.backward

    def counting_call(self, *xs):
        calls["op"] += 1
        return real_call(self, *xs)

    def counting_backward(*a, **k):
        calls["backward"] += 1
        return real_backward(*a, **k)

    monkeypatch.setattr(engine.Operation, "__call__", counting_call)
    monkeypatch.setattr(engine, "backward", counting_backward)

    def hook(i, m):
        if i == 1:
            calls["op"] = calls["backward"] = 0

    res = run(MLP, OPTS["sgd"], data, use_graph=True, hook=hook)
    assert calls == {"op": 0, "backward": 0}
    eager = run(MLP, OPTS["sgd"], data, use_graph=False)
    assert_same(eager, res)


def test_autograd_training_is_restored_and_set_for_training_calls():
    m = MLP()
    m.set_optimizer(opt.SGD(0.1))
    x = Tensor(data=np.ones((2, 6), np.float32))
    y = Tensor(data=np.zeros(2), dtype=np.int32, requires_grad=False)
    for flag in (False, True):
        m.train()
        assert autograd.training is True  # as SINGA's Model.train
        autograd.training = flag
        out, loss = m(x, y)  # would fail in backward if nothing was recorded
        assert autograd.training is flag  # a call restores what it found
        m.eval()
        assert autograd.training is False  # as SINGA's Model.eval
        autograd.training = flag
        assert m(x).creator.cache is None  # evaluation keeps no backward caches
        assert autograd.training is flag
    autograd.training = False


def test_replaced_parameter_array_triggers_a_new_trace():
    data = batches(4, (16, 6), 3)

    def hook(i, m):
        if i == 2:
            m.w0.data = m.w0.data.copy()  # rebinding (not in place)

    eager = run(MLP, OPTS["adam"], data, use_graph=False, hook=hook)
    graph = run(MLP, OPTS["adam"], data, use_graph=True, hook=hook)
    # Adam keys its slots by the Tensor, so both continue from the same state
    assert_same(eager, graph)


def test_new_input_buffer_reaches_views_made_outside_the_operators():
    class ViewModel(MLP):
        def train_one_batch(self, x, y):
            # a view of the input made with raw array code, then used by an operator
            x2 = Tensor.wrap(x.data[:, ::-1], x.device)
            out = self.forward(autograd.add(x, x2))
            loss = autograd.softmax_cross_entropy(out, y)
            self.optimizer(loss)
            return out, loss

    data = batches(4, (8, 6), 3)
    eager = run(ViewModel, OPTS["sgd"], data, use_graph=False, placeholder=False)
    graph = run(ViewModel, OPTS["sgd"], data, use_graph=True, placeholder=False)
    assert_same(eager, graph)


def test_scheduled_graph_skips_unused_input_gradients_and_frees_early():
    data = batches(2, (4, 2, 8, 8), 3)
    seq = run(CNN, OPTS["sgd"], data, use_graph=True, sequential=True)[3]
    sched = run(CNN, OPTS["sgd"], data, use_graph=True, sequential=False)[3]
    ((g_seq, _),) = seq._graphs.values()
    ((g_sched, _),) = sched._graphs.values()
    assert g_seq.order == list(range(g_seq.n_nodes))
    assert sorted(g_sched.order) == list(range(len(g_sched.order)))
    # the placeholder requires a gradient (SINGA's default) that nobody uses
    assert g_sched.disabled_grads >= 1 and g_seq.disabled_grads == 0
    # in-place kernels (ReLU, dropout's backward, gradient donation to the optimizer)
    assert g_sched.inplace_kernels >= 5 and g_seq.inplace_kernels == 0
    assert re.search(r"= i\d+\(", g_sched.source) and re.search(r"^    d\d+\(", g_sched.source, re.M)


# ----- models built from singa.layer --------------------------------------------------------
@pytest.mark.parametrize("sequential", [True, False])
def test_layer_mlp_graph_is_bitwise_eager(sequential):
    data = batches(6, (16, 6), 3, sizes=[16, 16, 16, 16, 16, 7])
    eager = run(LayerMLP, OPTS["sgd"], data, use_graph=False)
    graph = run(LayerMLP, OPTS["sgd"], data, use_graph=True, sequential=sequential)
    assert_same(eager, graph)
    assert set(graph[2]) == {"linear1.W", "linear1.b", "linear2.W", "linear2.b"}


@pytest.mark.parametrize("sequential", [True, False])
def test_layer_resnet_with_batchnorm_dropout_is_bitwise_eager(sequential):
    data = batches(5, (6, 3, 8, 8), 3, sizes=[6, 6, 6, 6, 4])
    make = lambda: opt.SGD(lr=opt.CosineDecay(0.1, 4), momentum=0.9, weight_decay=1e-4)  # noqa: E731

    def hook(i, m):  # evaluate between steps: eval forward must not disturb training
        if i in (2, 4):
            m.eval()
            evals.append(m(Tensor(data=data[i][0])).to_numpy())
            m.train()

    evals: list = []
    eager = run(LayerCNN, make, data, use_graph=False, hook=hook)
    eager_evals, evals = evals, []
    graph = run(LayerCNN, make, data, use_graph=True, sequential=sequential, hook=hook)
    assert_same(eager, graph)
    for a, b in zip(eager_evals, evals):
        np.testing.assert_array_equal(a, b)
    states = graph[2]
    assert "blocks.1.proj.W" in states and "blocks.0.bn1.running_var" in states


def _recorder_with_dead_output():
    from singa.model.graph import Recorder

    rec = Recorder(device.get_default_device(), [])
    out = np.ones(4)
    rec.record(np.copy, [], [out])
    return rec, weakref.ref(out), id(out)


def test_trace_does_not_keep_kernel_outputs_alive():
    """A traced output that nothing holds any more is freed during the trace, as in
    eager execution (holding them all doubled a ResNet's peak memory)."""
    rec, ref, _ = _recorder_with_dead_output()
    assert ref() is None
    assert rec.sizes[0] == 4 * 8  # what the scheduler needs is remembered


def test_identity_of_a_dead_output_is_not_taken_for_its_slot():
    """A new array that gets a dead output's id() is a new (external) value."""
    rec, _, dead_id = _recorder_with_dead_output()
    tries = [np.ones(4) for _ in range(200)]
    same = [a for a in tries if id(a) == dead_id]
    assert same, "CPython reuses a freed array's address for the next array of its size"
    s = rec.slot(same[0])
    assert s != 0 and rec.kinds[s] != rec.kinds[0]


def test_resnet_with_convolution_slices_on_two_workers_is_bitwise_eager_and_one_worker(monkeypatch):
    """Every convolution cut into one-sample batch slices run on two workers (their
    weight-gradient partials added in slice order): graph replay is bitwise eager,
    and both are bitwise the same run on one worker."""
    from singa.kernels import conv_slices, workers

    monkeypatch.setattr(conv_slices, "_CHUNK_BYTES", 1)
    monkeypatch.setattr(conv_slices, "_SKINNY_CHUNK_BYTES", 1)
    data = batches(3, (5, 3, 8, 8), 3)
    runs = []
    for n, use_graph in ((2, False), (2, True), (1, True)):
        monkeypatch.setattr(workers, "_count", [n])
        runs.append(run(LayerCNN, OPTS["sgd"], data, use_graph=use_graph))
    assert_same(runs[0], runs[1])
    assert_same(runs[1], runs[2])
