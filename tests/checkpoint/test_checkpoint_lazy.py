"""Loading before the parameters exist (before compile / the first call)."""

import numpy as np
import pytest
from test_checkpoint_helpers import LazyMLP, assert_states_equal, batches, states_of

from singa import checkpoint as ck
from singa import device, layer, opt
from singa.checkpoint.fileformat.file_reading import read_checkpoint
from singa.layer.base import Layer
from singa.tensor import Tensor

DEV = device.get_default_device()


def hooked(layer):
    """Whether a load hook waits on ``layer`` (set by ``Layer.set_initialize_hook``)."""
    return layer._initialize_hook is not None


def trained(tmp_path, din=5, steps=2, ratio=0.25):
    DEV.set_rand_seed(0)
    m = LazyMLP(ratio=ratio)
    m.set_optimizer(opt.Adam(0.01))
    tx = Tensor((4, din))
    m.compile([tx], is_train=True)
    for x, y in batches(steps, (4, din), 3):
        m(Tensor(data=x), Tensor(data=y, dtype=np.int32, requires_grad=False))
    p = tmp_path / "lazy.zip"
    m.save_states(p, {"epoch": 1})
    return m, p


def test_values_are_applied_when_the_parameters_are_created(tmp_path):
    src, p = trained(tmp_path)
    DEV.set_rand_seed(1)
    m = LazyMLP()
    m.set_optimizer(opt.Adam(0.01))
    aux = m.load_states(p)
    assert aux == {"epoch": 1} and aux.report.pending == ["fc1.W", "fc1.b", "fc2.W", "fc2.b"]
    assert hooked(m.fc1) and hooked(m.fc2)
    assert m.optimizer.steps == 0  # held until every parameter exists
    m.compile([Tensor((4, 5))], is_train=True)
    assert_states_equal(states_of(src), states_of(m))
    assert aux.report.pending == [] and not aux.report
    assert not hooked(m.fc1) and "_checkpoint_pending" not in vars(m)
    assert m.optimizer.steps == 2
    slots = m.optimizer.get_states(m.get_params())["slots"]
    np.testing.assert_array_equal(slots["fc2.W/v"], read_checkpoint(p).values["optimizer/fc2.W/v"])


def test_parameter_creation_does_not_consume_the_restored_random_stream(tmp_path):
    src, p = trained(tmp_path)
    state = DEV.get_rng_state()
    expected = DEV.rng.random(3)  # the stream right after the save
    DEV.set_rand_seed(3)
    m = LazyMLP(ratio=0.0)
    m.load_states(p)
    m.eval()
    m(Tensor(data=np.ones((4, 5), np.float32)))  # creates the parameters (random fills) only
    np.testing.assert_array_equal(DEV.rng.random(3), expected)

    # a first training call: parameter creation is invisible, the dropout masks are exact
    x, y = batches(1, (4, 5), 3, seed=9)[0]
    DEV.set_rng_state(state)
    src(Tensor(data=x), Tensor(data=y, dtype=np.int32, requires_grad=False))
    after = DEV.rng.random(3)
    DEV.set_rand_seed(4)
    m = LazyMLP()
    m.set_optimizer(opt.Adam(0.01))
    m.load_states(p)
    m(Tensor(data=x), Tensor(data=y, dtype=np.int32, requires_grad=False))
    np.testing.assert_array_equal(DEV.rng.random(3), after)
    assert_states_equal(states_of(src), states_of(m))


def test_shape_mismatch_found_at_creation_raises_naming_the_file(tmp_path):
    _, p = trained(tmp_path, din=5)
    m = LazyMLP()
    m.set_optimizer(opt.Adam(0.01))
    m.load_states(p)
    with pytest.raises(ck.CheckpointError) as e:
        m.compile([Tensor((4, 7))], is_train=True)
    msg = str(e.value)
    assert "lazy.zip" in msg and "fc1.W: expected (7, 8) float32, found (5, 8) float32" in msg
    assert not hooked(m.fc2) and "_checkpoint_pending" not in vars(m)


def test_strict_false_skips_mismatches_found_at_creation(tmp_path):
    src, p = trained(tmp_path, din=5)
    m = LazyMLP()
    m.set_optimizer(opt.Adam(0.01))
    aux = m.load_states(p, strict=False)
    with pytest.warns(ck.CheckpointWarning, match="fc1.W: expected"):
        m.compile([Tensor((4, 7))], is_train=True)
    assert aux.report.mismatched == ["fc1.W: expected (7, 8) float32, found (5, 8) float32"]
    np.testing.assert_array_equal(m.fc2.W.to_numpy(), src.fc2.W.to_numpy())
    np.testing.assert_array_equal(m.fc1.b.to_numpy(), src.fc1.b.to_numpy())
    assert aux.report.skipped == ["optimizer state of fc1.W"]
    slots = m.optimizer.get_states(m.get_params())["slots"]
    assert "fc1.W/m" not in slots
    np.testing.assert_array_equal(slots["fc2.W/m"], read_checkpoint(p).values["optimizer/fc2.W/m"])


class Block(Layer):
    """Creates a sublayer in its own initialize (nested lazy creation)."""

    def initialize(self, x):
        self.inner = layer.Linear(4)
        self.gain = Tensor(data=np.ones(4, np.float32), requires_grad=True, stores_grad=True)

    def forward(self, x):
        return self.inner(x) * self.gain


class Outer(Layer):
    def __init__(self):
        super().__init__()
        self.blk = Block()

    def forward(self, x):
        return self.blk(x)


def test_nested_lazy_layers(tmp_path):
    a = Outer()
    a(Tensor(data=np.ones((2, 3), np.float32)))
    a.blk.gain.data[...] = 3
    ck.save_layer(a, tmp_path / "n.zip")
    b = Outer()
    aux = ck.load_layer(b, tmp_path / "n.zip")
    assert aux.report.pending == ["blk.gain", "blk.inner.W", "blk.inner.b"]
    b(Tensor(data=np.ones((2, 3), np.float32)))
    assert_states_equal(states_of(a), states_of(b))
    assert aux.report.pending == []


def test_unexpected_entry_under_a_lazy_layer_raises_at_creation(tmp_path):
    a = Outer()
    a(Tensor(data=np.ones((2, 3), np.float32)))
    a.blk.extra = Tensor(data=np.ones(2, np.float32), requires_grad=False)
    ck.save_layer(a, tmp_path / "x.zip")
    b = Outer()
    ck.load_layer(b, tmp_path / "x.zip")
    with pytest.raises(ck.CheckpointError, match=r"unexpected: blk.extra \(found \(2,\) float32\)"):
        b(Tensor(data=np.ones((2, 3), np.float32)))


def test_unexpected_entry_under_an_eager_layer_is_found_at_load(tmp_path):
    """Layers that create nothing lazily (no initialize of their own) are checked at once."""
    a = Outer()
    a(Tensor(data=np.ones((2, 3), np.float32)))
    ck.save_layer(a, tmp_path / "x.zip", {})

    class Plain(Layer):
        def __init__(self):
            super().__init__()
            self.w = Tensor((2,), requires_grad=False)

    with pytest.raises(ck.CheckpointError, match="unexpected: blk.gain"):
        ck.load_layer(Plain(), tmp_path / "x.zip")


def test_saving_while_entries_are_held_keeps_them(tmp_path):
    src, p = trained(tmp_path)
    m = LazyMLP()
    m.set_optimizer(opt.Adam(0.01))
    m.load_states(p)
    m.save_states(tmp_path / "held.zip", {"epoch": 1})
    a, b = read_checkpoint(p), read_checkpoint(tmp_path / "held.zip")
    assert a.values.keys() == b.values.keys()
    for k in a.values:
        np.testing.assert_array_equal(a.values[k], b.values[k], err_msg=k)
    assert a.optimizer == b.optimizer


def test_a_second_load_replaces_the_held_entries(tmp_path):
    src, p = trained(tmp_path, steps=1)
    (tmp_path / "first.zip").write_bytes(p.read_bytes())
    src2, p2 = trained(tmp_path, steps=3)
    m = LazyMLP()
    m.set_optimizer(opt.Adam(0.01))
    m.load_states(tmp_path / "first.zip")
    m.load_states(p2)
    m.compile([Tensor((4, 5))], is_train=True)
    assert_states_equal(states_of(src2), states_of(m))
    assert m.optimizer.steps == 3


class Two(Layer):
    def __init__(self, second=True):
        super().__init__()
        self.fc1 = layer.Linear(4)
        if second:
            self.fc2 = layer.Linear(2)

    def forward(self, x):
        y = self.fc1(x)
        return self.fc2(y) if hasattr(self, "fc2") else y


def test_states_the_file_lacks_are_found_when_created(tmp_path):
    a = Two(second=False)
    a(Tensor(data=np.ones((2, 3), np.float32)))
    ck.save_layer(a, tmp_path / "one.zip")
    b = Two()
    aux = ck.load_layer(b, tmp_path / "one.zip")
    assert aux.report.pending == ["fc1.W", "fc1.b"]
    with pytest.raises(ck.CheckpointError, match=r"missing: fc2.W \(expected \(4, 2\) float32\)"):
        b(Tensor(data=np.ones((2, 3), np.float32)))
    c = Two()
    aux = ck.load_layer(c, tmp_path / "one.zip", strict=False)
    with pytest.warns(ck.CheckpointWarning, match="missing: fc2.W"):
        c(Tensor(data=np.ones((2, 3), np.float32)))
    assert aux.report.missing == ["fc2.W (expected (4, 2) float32)", "fc2.b (expected (2,) float32)"]
    np.testing.assert_array_equal(c.fc1.W.to_numpy(), a.fc1.W.to_numpy())
    assert "_checkpoint_pending" not in vars(c) and not hooked(c.fc2)


def test_loading_after_compile_installs_nothing(tmp_path):
    src, p = trained(tmp_path)
    m = LazyMLP()
    m.set_optimizer(opt.Adam(0.01))
    m.compile([Tensor((4, 5))], is_train=True)
    aux = m.load_states(p)
    assert not aux.report and aux.report.pending == []
    assert "_checkpoint_pending" not in vars(m)
    assert not any(hooked(s) for s in m.sublayers().values())
