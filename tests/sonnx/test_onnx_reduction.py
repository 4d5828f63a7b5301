"""Reductions: ONNX export checked by onnxruntime at two batch sizes (and, where
the test says so, imported back with ``sonnx.prepare`` and run against our output)."""

from __future__ import annotations

import pytest
from sonnx_helpers import check_export, rand

from singa import autograd

REDUCTIONS = [
    lambda x: autograd.reduce_sum(x, [1]),
    lambda x: autograd.reduce_mean(x, [1, 2], keepdims=0),
    lambda x: autograd.reduce_max(x, [-1]),
    lambda x: autograd.sum(x, 2),
    lambda x: autograd.mean(x, (1, 2)),
    lambda x: autograd.cumsum(x, -1),
    lambda x: autograd.cumsum(x, 1, exclusive=True, reverse=True),
]


@pytest.mark.parametrize("opset", [11, 17, 18])
@pytest.mark.parametrize("fn", REDUCTIONS)
def test_reductions_across_opsets(fn, opset):
    check_export(fn, lambda b: [rand((b, 3, 4))], opset=opset)
