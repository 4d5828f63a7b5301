"""SINGA's Model modes and names: train()/eval() set autograd.training, evaluation records
the graph without backward caches (so outputs export), parameters carry dotted names."""

import numpy as np
import pytest

from singa import autograd, layer, model, opt, sonnx, tensor


class MLP(model.Model):
    def __init__(self):
        super().__init__()
        self.linear1 = layer.Linear(6)
        self.relu = layer.ReLU()
        self.linear2 = layer.Linear(3)
        self.block = [layer.Linear(3)]

    def forward(self, x):
        return self.block[0](self.linear2(self.relu(self.linear1(x))))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


@pytest.fixture(autouse=True)
def restore_training():
    prev = autograd.training
    yield
    autograd.training = prev


def batch(b=4):
    rng = np.random.default_rng(b)
    return tensor.from_numpy(rng.standard_normal((b, 5)).astype(np.float32))


def test_train_and_eval_set_autograd_training():
    m = MLP()
    autograd.training = False
    m.train()
    assert autograd.training is True and m.training
    m.eval()
    assert autograd.training is False and not m.training
    m.compile([batch()], is_train=True, use_graph=False)
    assert autograd.training is True
    m.compile([batch()], is_train=False, use_graph=False)
    assert autograd.training is False


def test_parameters_carry_their_dotted_names():
    m = MLP()
    m.compile([batch()], is_train=False, use_graph=False)
    assert m.linear1.W.name == "linear1.W" and m.linear2.b.name == "linear2.b"
    assert m.block[0].W.name == "block.0.W"
    assert {n: t.name for n, t in m.get_states().items()} == {n: n for n in m.get_states()}


def test_names_after_a_first_call_without_compile():
    m = MLP()
    m.set_optimizer(opt.SGD(0.1))
    m.train()
    m(batch(), tensor.from_numpy(np.arange(4) % 3))
    assert m.linear1.W.name == "linear1.W" and m.block[0].b.name == "block.0.b"
    lin = layer.Linear(2)  # a layer used on its own names its tensors from itself
    lin(batch())
    assert (lin.W.name, lin.b.name) == ("W", "b")


def test_eval_call_records_graph_without_caches_and_exports():
    m = MLP()
    x = batch()
    m.compile([x], is_train=False, use_graph=False)
    m.eval()
    y = m(x)
    assert y.creator is not None and y.creator.cache is None
    proto = sonnx.to_onnx([x], [y])
    assert len(proto.graph.node) > 0
    with pytest.raises(RuntimeError, match="autograd.training"):
        autograd.gradients(autograd.sum(y))


def test_singa_documented_export_flow():
    """compile([x], is_train=False, use_graph=False); y = m.forward(x); to_onnx([x], [y])."""
    m = MLP()
    x = batch()
    m.compile([x], is_train=False, use_graph=False)
    y = m.forward(x)
    proto = sonnx.to_onnx([x], [y])
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x.to_numpy()})[0]
    np.testing.assert_allclose(got, y.to_numpy(), rtol=1e-5, atol=1e-6)


def test_training_still_updates_after_eval():
    m = MLP()
    m.set_optimizer(opt.SGD(0.1))
    x, t = batch(), tensor.from_numpy(np.arange(4) % 3)
    m.compile([x], is_train=True, use_graph=False)
    before = m.linear1.W.to_numpy()
    m.eval()
    m(x)
    m.train()
    m(x, t)
    assert not np.array_equal(before, m.linear1.W.to_numpy())


def test_a_sublayer_does_not_keep_its_parent_alive():
    import gc
    import weakref

    m = MLP()
    m.compile([batch()], is_train=False, use_graph=False)
    sub, ref = m.linear1, weakref.ref(m)
    del m
    gc.collect()
    assert ref() is None
    sub.name_states()  # the parent is gone: names from the sublayer itself
    assert sub.W.name == "W"
