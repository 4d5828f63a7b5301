"""Layer base: state naming through attributes and containers, set_states validation, modes."""

import numpy as np
import pytest

from singa.layer.base import Layer
from singa.tensor import Tensor


class Leaf(Layer):
    def __init__(self, n):
        super().__init__()
        self.W = Tensor((n, 2), requires_grad=True, stores_grad=True)
        self.running = Tensor((n,), requires_grad=False)
        self._scratch = Tensor((3,))  # private: not state


class Net(Layer):
    def __init__(self):
        super().__init__()
        self.layers = [Leaf(1), Leaf(2)]
        self.heads = {"a": Leaf(3)}
        self.shared = self.layers[0]  # the first path wins


def test_names_are_dotted_paths_through_containers():
    net = Net()
    assert list(net.get_params()) == ["layers.0.W", "layers.1.W", "heads.a.W"]
    assert list(net.get_states()) == [
        "layers.0.W",
        "layers.0.running",
        "layers.1.W",
        "layers.1.running",
        "heads.a.W",
        "heads.a.running",
    ]
    assert all(t.name is None for t in net.get_states().values())


def test_set_states_validates_everything_before_changing_anything():
    net = Net()
    good = {n: np.full(t.shape, 7, t.dtype) for n, t in net.get_states().items()}
    bad = dict(good)
    bad["layers.1.W"] = np.zeros((5, 5), np.float32)
    del bad["heads.a.running"]
    bad["extra"] = np.zeros(1, np.float32)
    with pytest.raises(ValueError) as e:
        net.set_states(bad)
    msg = str(e.value)
    assert "missing: heads.a.running" in msg and "unexpected: extra" in msg
    assert "layers.1.W: expected (2, 2) float32, found (5, 5) float32" in msg
    assert all((t.to_numpy() == 0).all() for t in net.get_states().values())
    res = net.set_states(bad, strict=False)
    assert res.missing == ["heads.a.running"] and res.unexpected == ["extra"] and len(res.mismatched) == 1
    assert (net.get_states()["layers.0.W"].to_numpy() == 7).all()
    arr = net.layers[0].W.data
    net.set_states(good)
    assert net.layers[0].W.data is arr  # copied in place


def test_dtype_mismatch_is_reported():
    net = Leaf(1)
    with pytest.raises(ValueError, match="float64"):
        net.set_states({"W": np.zeros((1, 2)), "running": np.zeros(1, np.float32)})


def test_train_eval_reach_every_sublayer():
    net = Net()
    net.eval()
    assert not any(sub.training for sub in net.sublayers().values()) and not net.training
    net.train()
    assert all(sub.training for sub in net.sublayers().values())


def test_errors_name_the_method_called():
    net = Leaf(1)
    with pytest.raises(ValueError, match=r"^Leaf\.set_params: unexpected: extra"):
        net.set_params({"W": np.zeros((1, 2), np.float32), "extra": np.zeros(1, np.float32)})
    with pytest.raises(ValueError, match=r"^Leaf\.set_states: missing: running"):
        net.set_states({"W": np.zeros((1, 2), np.float32)})


@pytest.mark.parametrize(
    "value,kind", [([[0.0, 0.0]], "list"), (1.5, "float"), ("W", "str"), (None, "NoneType")]
)
@pytest.mark.parametrize("method", ["set_states", "set_params"])
def test_non_array_values_raise_type_error_naming_key_and_type(method, value, kind):
    net = Leaf(1)
    states = {"W": value, "running": np.zeros(1, np.float32)}
    for strict in (True, False):
        with pytest.raises(TypeError, match=rf"^Leaf\.{method}: .*'W' is a {kind}"):
            getattr(net, method)(states, strict=strict)
    assert (net.W.to_numpy() == 0).all() and (net.running.to_numpy() == 0).all()


def test_tensors_numpy_arrays_and_numpy_scalars_are_accepted():
    class Scalar(Layer):
        def __init__(self):
            super().__init__()
            self.s = Tensor((), requires_grad=False)

    net = Leaf(1)
    net.set_states({"W": Tensor(data=np.full((1, 2), 3.0)), "running": np.full(1, 4, np.float32)})
    assert (net.W.to_numpy() == 3).all() and (net.running.to_numpy() == 4).all()
    sc = Scalar()
    sc.set_states({"s": np.float32(2.5)})
    assert sc.s.to_numpy() == 2.5


def test_loading_into_a_lazy_layer_hints_that_it_has_no_parameters_yet():
    from singa import layer

    class Net(Layer):
        def __init__(self):
            super().__init__()
            self.fc = layer.Linear(3)
            self.head = Leaf(1)

    a, b = Net(), Net()
    a.fc(Tensor(data=np.ones((2, 4)), requires_grad=False))
    saved = {n: t.to_numpy() for n, t in a.get_states().items()}
    with pytest.raises(ValueError) as e:
        b.set_states(saved)
    msg = str(e.value)
    assert "unexpected: fc.W" in msg
    assert msg.endswith("fc (Linear) has no parameters yet: call it once on an input or give the input sizes")
    res = b.set_states(saved, strict=False)
    assert res.unexpected == ["fc.W", "fc.b"] and res.uninitialized == ["fc (Linear)"]
    with pytest.raises(ValueError, match=r"^Linear\.set_params: unexpected: W; unexpected: b; Linear has no"):
        layer.Linear(3).set_params({"W": saved["fc.W"], "b": saved["fc.b"]})
    # an unexpected name outside any lazy layer gets no hint
    with pytest.raises(ValueError) as e:
        a.set_states({**saved, "nope": np.zeros(1)})
    assert "no parameters yet" not in str(e.value)


def test_sized_layers_get_no_lazy_hint_and_bad_containers_are_named():
    from singa import layer

    fc = layer.Linear(4, 5)  # parameters exist before the first call
    states = {n: t.to_numpy() for n, t in fc.get_states().items()}
    with pytest.raises(ValueError) as e:
        fc.set_states({**states, "bias": np.zeros(5, np.float32)})
    assert str(e.value) == "Linear.set_states: unexpected: bias"
    for bad, what in (
        ([1, 2], "got a list"),
        (None, "got a NoneType"),
        ({3: np.zeros(2)}, "names must be strings, got 3"),
    ):
        with pytest.raises(TypeError, match=f"Linear.set_params: .*{what}"):
            fc.set_params(bad)
