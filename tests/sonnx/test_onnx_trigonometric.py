"""Trigonometric functions: ONNX export checked by onnxruntime at two batch sizes (and, where
the test says so, imported back with ``sonnx.prepare`` and run against our output)."""

from __future__ import annotations

import pytest
from sonnx_helpers import op_types, roundtrip, unit

from singa import autograd

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


TRIG = {
    "Sin": autograd.sin,
    "Cos": autograd.cos,
    "Tan": autograd.tan,
    "Asin": autograd.asin,
    "Acos": autograd.acos,
    "Atan": autograd.atan,
    "Sinh": autograd.sinh,
    "Cosh": autograd.cosh,
    "Asinh": autograd.asinh,
    "Acosh": lambda x: autograd.acosh(autograd.add(autograd.abs(x), 1.1)),
    "Atanh": autograd.atanh,
}


@pytest.mark.parametrize("op_type", TRIG)
def test_trigonometric(op_type):
    model = roundtrip(TRIG[op_type], unit)
    assert op_type in op_types(model)
