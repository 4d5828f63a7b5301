"""Export across families: every autograd operator has a converter, export options
(names, static and dynamic batch, opsets, outputs) and export errors. The per-family
export tests are in ``test_onnx_<family>.py``."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import warnings

import numpy as np
import pytest
from sonnx_helpers import check_export, rand, session

import singa.autograd as ag
from singa import autograd, layer, model, sonnx, tensor
from singa.autograd.engine import Operation
from singa.sonnx.registry import EXPORT as CONVERTERS


def test_every_autograd_operator_has_a_converter():
    missing = []
    for info in pkgutil.iter_modules(ag.__path__):
        mod = importlib.import_module(f"singa.autograd.{info.name}")
        for name, cls in vars(mod).items():
            if (
                inspect.isclass(cls)
                and issubclass(cls, Operation)
                and cls is not Operation
                and cls.__module__ == mod.__name__
                and not name.startswith("_")
                and cls not in CONVERTERS
            ):
                missing.append(f"{mod.__name__}.{name}")
    assert not missing


# ----- training graphs (losses) -------------------------------------------------------------------


# ----- options and errors ----------------------------------------------------------------------------------
def test_static_batch_and_names():
    m = check_export(
        lambda a, c: autograd.add(a, c),
        lambda b: [rand((3, 2)), rand((3, 2), seed=2)],
        batches=(3,),
        dynamic_batch=False,
        input_names=["a", "c"],
        output_names=["sum"],
    )
    assert [i.name for i in m.graph.input] == ["a", "c"]
    assert m.graph.output[0].name == "sum"
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 3


def test_output_that_is_an_input_or_repeated():
    m = check_export(lambda x: (x, autograd.relu(x), autograd.relu(x)), lambda b: [rand((b, 2))])
    assert [o.name for o in m.graph.output] == ["output_0", "output_1", "output_2"]


def test_bad_opset():
    x = tensor.from_numpy(rand((2, 2)))
    with pytest.raises(ValueError, match="opset 9"):
        sonnx.to_onnx([x], autograd.relu, opset=9)


class Custom(Operation):
    def forward(self, x):
        return x * 2

    def backward(self, dy):
        return dy * 2


def test_unexportable_operator_names_it_and_its_layer():
    class Inner(layer.Layer):
        def forward(self, x):
            return Custom()(x)[0]

    class Net(model.Model):
        def __init__(self):
            super().__init__()
            self.block = Inner()

        def forward(self, x):
            return self.block(autograd.relu(x))

    with pytest.raises(sonnx.ExportError, match=r"Custom in layer block \(Inner\)"):
        sonnx.to_onnx([tensor.from_numpy(rand((2, 3)))], Net())


def test_batch_dependent_constant_is_reported():
    def f(x):
        return autograd.add(x, tensor.from_numpy(np.ones(x.shape, np.float32)))

    with pytest.raises(sonnx.ExportError, match="depends on the batch size"):
        sonnx.to_onnx([tensor.from_numpy(rand((2, 3)))], f, dynamic_batch=True)
    sonnx.to_onnx([tensor.from_numpy(rand((2, 3)))], f, dynamic_batch=False)


def test_batch_dependent_attribute_is_reported():
    def f(x):
        return autograd.gather(x, 0, list(range(x.shape[0])))

    with pytest.raises(sonnx.ExportError, match="Gather: input 1 is a constant that depends on the batch"):
        sonnx.to_onnx([tensor.from_numpy(rand((2, 3)))], f, dynamic_batch=True)

    def g(x):
        return autograd.split(x, 0, x.shape[0])[0]

    with pytest.raises(sonnx.ExportError, match="different operators at batch sizes 2 and 3"):
        sonnx.to_onnx([tensor.from_numpy(rand((2, 3)))], g, dynamic_batch=True)

    def h(x):
        y = autograd.matmul(x, autograd.transpose(x))
        return autograd.reshape(y, (1, 1, x.shape[0], x.shape[0]))

    with pytest.raises(sonnx.ExportError, match="several sizes that depend on the batch"):
        sonnx.to_onnx([tensor.from_numpy(rand((2, 3)))], h, dynamic_batch=True)


def test_default_falls_back_to_a_fixed_batch_with_a_warning():
    """SINGA's exporter always fixes the batch: by default a computation tied to the
    batch size is exported with a fixed one, and the warning says why."""

    def f(x):
        return autograd.reshape(x, (3, 2, 3))

    x = tensor.from_numpy(rand((3, 6)))
    with pytest.warns(UserWarning, match="does not run at batch size 4.*fixed at 3"):
        m = sonnx.to_onnx([x], f)
    assert [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim] == [3, 2, 3]
    assert [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim] == [3, 6]
    (got,) = session(m).run(None, {"input": x.to_numpy()})
    np.testing.assert_array_equal(got, x.to_numpy().reshape(3, 2, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a computation that follows the batch: dynamic, no warning
        m = sonnx.to_onnx([x], lambda x: autograd.relu(x))
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"


def test_fixed_batch_computation_says_to_export_a_static_batch():
    def f(x):
        return autograd.reshape(x, (3, 2, 3))

    x = tensor.from_numpy(rand((3, 6)))
    with pytest.raises(sonnx.ExportError, match="does not run at batch size 4.*dynamic_batch=False"):
        sonnx.to_onnx([x], f, dynamic_batch=True)
    m = sonnx.to_onnx([x], f, dynamic_batch=False)
    assert [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim] == [3, 2, 3]


def test_outputs_must_be_tensors_a_layer_or_a_function():
    x = tensor.from_numpy(rand((2, 3)))
    with pytest.raises(TypeError, match="output Tensor\\(s\\), the Layer/Model or the function"):
        sonnx.to_onnx([x], [np.ones(3)])
    # tensors (see test_export_tensors.py): from_numpy's input requires a gradient, as in
    # SINGA, so relu(x) is recorded and exports
    assert [n.op_type for n in sonnx.to_onnx([x], [autograd.relu(x)]).graph.node] == ["Relu"]
