"""Activations: ONNX export checked by onnxruntime at two batch sizes (and, where
the test says so, imported back with ``sonnx.prepare`` and run against our output)."""

from __future__ import annotations

import pytest
from sonnx_helpers import check_export, op_types, param, rand, roundtrip, unit

from singa import autograd

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


ACTIVATIONS = [
    autograd.relu,
    lambda x: autograd.leakyrelu(x, 0.1),
    lambda x: autograd.elu(x, 0.7),
    autograd.selu,
    autograd.sigmoid,
    autograd.tanh,
    autograd.softplus,
    autograd.softsign,
    autograd.gelu,
    lambda x: autograd.gelu(x, "tanh"),
    lambda x: autograd.hardsigmoid(x, 0.3, 0.4),
    lambda x: autograd.softmax(x, axis=1),
    lambda x: autograd.softmax(x, axis=-1),
    lambda x: autograd.log_softmax(x, axis=1),
]


@pytest.mark.parametrize("opset", [11, 13, 17, 20])
@pytest.mark.parametrize("fn", ACTIVATIONS)
def test_activations_across_opsets(fn, opset):
    m = check_export(fn, lambda b: [rand((b, 3, 4))], opset=opset)
    assert m.opset_import[0].version == opset


def test_gelu_is_a_node_from_opset_20_and_a_formula_before():
    assert op_types(check_export(autograd.gelu, lambda b: [rand((b, 3))], opset=20)) == ["Gelu"]
    assert "Erf" in op_types(check_export(autograd.gelu, lambda b: [rand((b, 3))], opset=17))


def test_prelu_per_channel_and_two_way_broadcast():
    s = param(rand((3, 1), seed=1, low=0.1, high=0.5))
    assert "PRelu" in op_types(roundtrip(lambda x: autograd.prelu(x, s), unit))
    s2 = param(rand((3, 4), seed=2, low=0.1, high=0.5))
    roundtrip(lambda x: autograd.prelu(x, s2), lambda b: [rand((b, 1, 4), seed=3)])
