"""Indexing: ONNX export checked by onnxruntime at two batch sizes (and, where
the test says so, imported back with ``sonnx.prepare`` and run against our output)."""

from __future__ import annotations

import numpy as np
import pytest
from sonnx_helpers import check_export, op_types, rand, roundtrip, unit

from singa import autograd, tensor

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_onehot_nonzero_scatter_elements():
    values = np.array([-1.0, 2.0], np.float32)
    model = roundtrip(
        lambda i: autograd.onehot(1, i, 5, values), lambda b: [np.arange(b * 3).reshape(b, 3) % 7 - 3]
    )
    assert "OneHot" in op_types(model)
    assert "NonZero" in op_types(roundtrip(lambda x: autograd.nonzero(autograd.greater(x, 0.2)), unit))
    idx = np.array([[2, 0], [1, 3]])
    model = roundtrip(
        lambda x: autograd.scatter_elements(x, idx, autograd.slice(x, [0, 0], [2, 2], [0, 1]), 1),
        lambda b: [rand((b, 4), seed=10)],
    )
    assert "ScatterElements" in op_types(model)
    roundtrip(
        lambda x: autograd.scatter_elements(x, idx, autograd.slice(x, [0, 0], [2, 2], [0, 1]), 1, "add"),
        lambda b: [rand((b, 4), seed=10)],
        opset=16,
    )


INDEXING = [
    lambda x: autograd.gather(x, 2, [3, 0, 0]),
    lambda x: autograd.where(x, autograd.neg(x), tensor.from_numpy(np.array([True, False, True, True]))),
    lambda x: x[:, 1],
    lambda x: x[..., ::-1],
    lambda x: x[:, None, 1:, -1],
    lambda x: x[:, :, [2, 0]],
]


@pytest.mark.parametrize("fn", INDEXING)
def test_indexing_operators(fn):
    check_export(fn, lambda b: [rand((b, 3, 4))])
