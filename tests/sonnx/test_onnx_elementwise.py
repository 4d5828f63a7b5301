"""Elementwise arithmetic: ONNX export checked by onnxruntime at two batch sizes (and, where
the test says so, imported back with ``sonnx.prepare`` and run against our output)."""

from __future__ import annotations

import numpy as np
import pytest
from sonnx_helpers import check_export, op_types, rand, roundtrip, unit

from singa import autograd, tensor

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


ELEMENTWISE = [
    lambda x: autograd.add(x, 2.0),
    lambda x: autograd.sub(1.0, x),
    lambda x: autograd.mul(x, x),
    lambda x: autograd.div(x, autograd.add(autograd.abs(x), 1.0)),
    lambda x: autograd.pow(autograd.abs(x), 1.5),
    lambda x: autograd.neg(x),
    lambda x: autograd.exp(x),
    lambda x: autograd.log(autograd.add(autograd.abs(x), 0.5)),
    lambda x: autograd.sqrt(autograd.abs(x)),
    lambda x: autograd.sign(x),
    lambda x: autograd.clip(x, -0.5, 0.5),
    lambda x: autograd.clip(x, None, 0.3),
    lambda x: autograd.clip(x, -0.2),
    lambda x: autograd.maximum(x, autograd.neg(x)),
    lambda x: autograd.minimum(x, 0.1),
    lambda x: x * 3 + tensor.from_numpy(np.arange(4, dtype=np.int64)),  # mixed dtypes are cast
]


@pytest.mark.parametrize("fn", ELEMENTWISE)
def test_elementwise(fn):
    check_export(fn, lambda b: [rand((b, 4))])


SINGA_ELEMENTWISE = {
    "Reciprocal": lambda x: autograd.reciprocal(autograd.add(autograd.abs(x), 0.5)),
    "Neg": autograd.negative,
    "Exp": lambda x: autograd.exp(autograd.identity(x)),  # the exporter drops Identity nodes
}


@pytest.mark.parametrize("op_type", SINGA_ELEMENTWISE)
def test_identity_negative_reciprocal(op_type):
    assert op_type in op_types(roundtrip(SINGA_ELEMENTWISE[op_type], unit))
