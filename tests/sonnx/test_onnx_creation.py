"""Creation operators: ONNX export checked by onnxruntime at two batch sizes (and, where
the test says so, imported back with ``sonnx.prepare`` and run against our output)."""

from __future__ import annotations

import pytest
from sonnx_helpers import op_types, roundtrip, unit

from singa import autograd

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_shape_and_constant_of_shape():
    model = roundtrip(lambda x: autograd.shape(x), unit)
    assert op_types(model) == ["Shape"]
    model = roundtrip(lambda x: autograd.add(x, autograd.constant_of_shape(autograd.shape(x), 0.5)), unit)
    assert "ConstantOfShape" in op_types(model)
