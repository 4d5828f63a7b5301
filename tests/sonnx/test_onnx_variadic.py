"""Variadic operators (Sum, Mean, Max, Min of several inputs): ONNX export checked by
onnxruntime at two batch sizes, imported back with ``sonnx.prepare`` and run against
our output."""

from __future__ import annotations

import pytest
from sonnx_helpers import op_types, roundtrip, unit

from singa import autograd

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


VARIADIC = {
    "Max": lambda x: autograd.max(x, autograd.neg(x), autograd.mul(x, 0.5)),
    "Min": lambda x: autograd.min(x, autograd.reduce_sum(x, [2])),
    "Sum": lambda x: autograd.Sum()(x, x, autograd.neg(autograd.reduce_mean(x, [1])))[0],
    "Mean": lambda x: autograd.Mean()(x, autograd.exp(x))[0],
}


@pytest.mark.parametrize("op_type", VARIADIC)
def test_variadic(op_type):
    model = roundtrip(VARIADIC[op_type], unit)
    assert op_type in op_types(model)
