"""Layer helpers from SINGA's API: register_layers, device/dtype checks, initialize on forward."""

import numpy as np
import pytest

from singa import layer, tensor
from singa.layer import Layer


class _Holder(Layer):
    def __init__(self, *subs):
        super().__init__()
        self.register_layers(*subs)

    def forward(self, x):
        return x


def test_register_layers_names_them_by_class_and_position():
    h = _Holder(layer.Linear(2, 3), layer.ReLU(), layer.Linear(3, 1))
    assert sorted(h.get_params()) == ["Linear_0.W", "Linear_0.b", "Linear_2.W", "Linear_2.b"]
    assert isinstance(h.ReLU_1, layer.ReLU)


def test_register_layers_with_a_dict_and_bad_entries():
    h = _Holder()
    h.register_layers({"enc": layer.Linear(2, 2)})
    assert sorted(h.get_params()) == ["enc.W", "enc.b"]
    with pytest.raises(TypeError, match="not layers"):
        h.register_layers(layer.ReLU(), 3)
    with pytest.raises(ValueError, match="valid attribute name"):
        h.register_layers({"a b": layer.ReLU()})
    assert not hasattr(h, "ReLU_0")  # nothing registered by the failed calls


def test_dtype_check_converts_to_the_first_tensors_dtype():
    a = tensor.from_numpy(np.ones(2, np.float32))
    b = tensor.from_numpy(np.array([1.5, 2.5], np.float64))
    Layer().dtype_check(a, b)
    assert b.dtype == np.float32 and b.to_numpy().tolist() == [1.5, 2.5]


def test_device_check_keeps_tensors_on_the_same_device():
    a, b = tensor.zeros((2,)), tensor.zeros((2,))
    dev = a.device
    Layer().device_check(a, b)
    assert b.device is dev
    Layer().device_check()  # no inputs: nothing to do


class _Scaled(Layer):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def initialize(self, x):
        self.calls += 1
        self.w = tensor.from_numpy(np.full(x.shape[-1], 2.0, np.float32))

    def forward(self, x):
        return x * self.w


def test_forward_called_directly_initializes_first():
    lay = _Scaled()
    y = lay.forward(tensor.from_numpy(np.ones((1, 3), np.float32)))
    np.testing.assert_array_equal(y.to_numpy(), [[2, 2, 2]])
    lay(tensor.from_numpy(np.ones((1, 3), np.float32)))
    assert lay.calls == 1


def test_an_explicit_initialize_is_not_repeated_by_the_first_call():
    lay = _Scaled()
    lay.initialize(tensor.zeros((1, 3)))
    lay.w.set_value(5.0)  # e.g. pretrained values loaded after initialize
    y = lay(tensor.from_numpy(np.ones((1, 3), np.float32)))
    np.testing.assert_array_equal(y.to_numpy(), [[5, 5, 5]])
    assert lay.calls == 1
