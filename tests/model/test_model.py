"""The Model class: compile, modes, calling, optimizer, delegations."""

import sys
import types

import numpy as np
import pytest
from model_helpers import CNN, MLP, batches

from singa import autograd, model, opt
from singa.tensor import Tensor


class Lazy(model.Model):
    """Creates its weight from the first input's shape (like layer.Linear)."""

    def __init__(self):
        super().__init__()
        self.initialized_with = None

    def initialize(self, x):
        self.initialized_with = x.shape
        self.w = Tensor((x.shape[1], 3), requires_grad=True, stores_grad=True).gaussian(0.0, 0.1)

    def forward(self, x):
        return autograd.matmul(x, self.w)

    def train_one_batch(self, x, y):
        loss = autograd.softmax_cross_entropy(self.forward(x), y)
        self.optimizer(loss)
        return loss


def test_compile_creates_parameters_and_sets_modes():
    m = Lazy()
    tx = Tensor((5, 7))
    m.compile([tx], is_train=False, use_graph=True, sequential=True)
    assert m.initialized_with == (5, 7) and m.w.shape == (7, 3)
    assert list(m.get_params()) == ["w"]
    assert not m.training and m.graph_mode and m.sequential
    m.compile([tx], is_train=True, use_graph=False)
    assert m.training and not m.graph_mode and m.initialized_with == (5, 7)


def test_compile_changes_no_parameter_or_running_statistic():
    m = CNN()
    m.running_mean.set_value(0.5)
    m.running_var.set_value(2.0)
    before = {k: v.to_numpy() for k, v in m.get_states().items()}
    tx = Tensor(data=np.random.default_rng(0).standard_normal((4, 2, 8, 8)) * 3 + 1)
    autograd.training = True
    try:
        m.compile([tx], is_train=True, use_graph=False)
    finally:
        autograd.training = False
    for k, v in m.get_states().items():
        np.testing.assert_array_equal(v.to_numpy(), before[k], err_msg=k)
    assert m.training  # restored to is_train


def test_compile_validates_inputs():
    with pytest.raises(ValueError, match="list of Tensors"):
        MLP().compile([np.zeros((2, 6))])


def test_call_dispatches_on_mode():
    m = MLP()
    m.set_optimizer(opt.SGD(0.1))
    x = Tensor(data=np.ones((2, 6), np.float32))
    y = Tensor(data=np.array([0, 1]), dtype=np.int32, requires_grad=False)
    w0 = m.w0.to_numpy()
    out, loss = m(x, y)  # training: train_one_batch updates
    assert loss.shape == (1,) and not np.array_equal(m.w0.to_numpy(), w0)
    m.eval()
    w0 = m.w0.to_numpy()
    logits = m(x)  # evaluation: forward only
    assert logits.shape == (2, 3) and np.array_equal(m.w0.to_numpy(), w0)
    assert m.train() is m and m.training
    assert m.eval() is m and not m.training


def test_set_optimizer_stores_it_and_subclass_override_works():
    class Custom(MLP):
        def set_optimizer(self, optimizer):  # as in SINGA's examples
            self.optimizer = optimizer

    for cls in (MLP, Custom):
        m = cls()
        sgd = opt.SGD(0.1)
        m.set_optimizer(sgd)
        assert m.optimizer is sgd


def test_changing_optimizer_or_mode_uses_other_traces():
    data = batches(3, (4, 6), 3)
    m = MLP()
    m.set_optimizer(opt.SGD(0.1))
    m.compile([Tensor((4, 6))], use_graph=True)
    x, y = Tensor(data=data[0][0]), Tensor(data=data[0][1], dtype=np.int32, requires_grad=False)
    m(x, y)
    m(x, y)
    assert len(m._graphs) == 1
    m.graph(True, sequential=True)
    m(x, y)
    assert len(m._graphs) == 2
    m.optimizer = opt.Adam(0.01)  # assigned directly, as SINGA's set_optimizer does
    m(x, y)
    assert len(m._graphs) == 3
    assert m.optimizer.steps == 1
    m.reset_graph()
    assert len(m._graphs) == 0
    m.graph(False)
    m(x, y)
    assert len(m._graphs) == 0 and m.optimizer.steps == 2


def test_non_tensor_arguments_are_part_of_the_signature():
    class Scaled(MLP):
        def train_one_batch(self, x, y, factor):
            out = self.forward(autograd.mul(x, Tensor(data=np.float32(factor), requires_grad=False)))
            loss = autograd.softmax_cross_entropy(out, y)
            self.optimizer(loss)
            return {"loss": loss, "factor": factor}

    data = batches(4, (4, 6), 3)
    results = []
    for use_graph in (False, True):
        m = Scaled()
        m.set_optimizer(opt.SGD(0.1))
        m.graph(use_graph)
        r = []
        for i, (x, y) in enumerate(data):
            res = m(Tensor(data=x), Tensor(data=y, dtype=np.int32, requires_grad=False), 1.0 + i % 2)
            r.append(res["loss"].to_numpy())
            assert res["factor"] == 1.0 + i % 2
        results.append(r)
        if use_graph:
            assert len(m._graphs) == 2
    np.testing.assert_array_equal(results[0], results[1])


def test_delegations(monkeypatch):
    calls = []
    ckpt = types.ModuleType("fake_checkpoint")
    ckpt.save_model = lambda m, f, aux=None, compress=False: calls.append(("save", f, aux, compress))
    ckpt.load_model = lambda m, f, strict=True: calls.append(("load", f, strict)) or {"epoch": 3}
    monkeypatch.setattr(sys.modules["singa.model.model"], "checkpoint", ckpt)
    m = MLP()
    m.save_states("a.zip", aux_states={"epoch": 3})
    m.save_states("b.zip", compress=True)
    assert m.load_states("a.zip", strict=False) == {"epoch": 3}
    assert calls == [
        ("save", "a.zip", {"epoch": 3}, False),
        ("save", "b.zip", None, True),
        ("load", "a.zip", False),
    ]


def test_model_api_example_trains_and_graph_matches_eager():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[2] / "examples" / "model_api" / "mlp.py"
    spec = importlib.util.spec_from_file_location("model_api_mlp", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    graph = example.main(["--epochs", "6", "--quiet"])
    eager = example.main(["--epochs", "6", "--quiet", "--no-graph"])
    seq = example.main(["--epochs", "6", "--quiet", "--sequential"])
    assert graph["losses"][-1] < 0.6 * graph["losses"][0]
    assert graph["accuracy"] > 0.85
    for run in (eager, seq):
        assert run["losses"] == graph["losses"]
        for k, v in graph["params"].items():
            np.testing.assert_array_equal(v, run["params"][k])
