"""ONNX export of the self-gated activations (silu, hardswish, mish) checked by
onnxruntime at two batch sizes and in each opset form, and import of one-node HardSwish
and Mish models checked against numpy and onnxruntime."""

import numpy as np
import pytest
from sonnx_helpers import check_export, op_types, ort_node_model, rand, run_node_model

from singa import autograd, layer, sonnx, tensor


def _ops(model):
    return [t for t in op_types(model) if t != "Constant"]


def test_silu_exports_and_imports():
    model = check_export(autograd.silu, lambda b: [rand((b, 3, 4))])
    assert _ops(model) == ["Sigmoid", "Mul"]
    x = rand((2, 3, 4))
    (got,) = sonnx.prepare(model).run([x])
    np.testing.assert_allclose(got, autograd.silu(tensor.from_numpy(x)).to_numpy(), rtol=1e-6)


def _wide(b):
    return [rand((b, 3, 4), low=-6.0, high=6.0)]  # both flat pieces of hardswish


@pytest.mark.parametrize(
    "fn,opset,ops",
    [
        (autograd.hardswish, 14, ["HardSwish"]),
        (autograd.hardswish, 13, ["HardSigmoid", "Mul"]),
        (autograd.mish, 18, ["Mish"]),
        (autograd.mish, 17, ["Softplus", "Tanh", "Mul"]),
    ],
)
def test_hardswish_and_mish_export_in_each_opset_form(fn, opset, ops):
    model = check_export(fn, _wide, opset=opset, tol=1e-5)
    assert _ops(model) == ops
    x = _wide(2)[0]
    (got,) = sonnx.prepare(model).run([x])  # and back through our importer
    np.testing.assert_allclose(got, fn(tensor.from_numpy(x)).to_numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "op_type,opset,ref",
    [
        ("HardSwish", 14, lambda x: x * np.clip(x + 3, 0, 6) / 6),
        ("Mish", 18, lambda x: x * np.tanh(np.log1p(np.exp(x)))),
    ],
)
def test_hardswish_and_mish_nodes_import(op_type, opset, ref):
    x = np.linspace(-6, 6, 25).reshape(5, 5).astype(np.float32)
    (got,) = run_node_model(op_type, {"x": x}, opset=opset)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, ref(x.astype(np.float64)), rtol=1e-5, atol=1e-6)
    (want,) = ort_node_model(op_type, {"x": x}, opset=opset)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make_layer,op", [(layer.HardSwish, "HardSwish"), (layer.Mish, "Mish")])
def test_the_layers_export(make_layer, op):
    model = check_export(make_layer(), _wide, opset=18, tol=1e-5)
    assert _ops(model) == [op]
