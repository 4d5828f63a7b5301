"""Matrix products and bias: ONNX export checked by onnxruntime at two batch sizes (and, where
the test says so, imported back with ``sonnx.prepare`` and run against our output)."""

from __future__ import annotations

import pytest
from sonnx_helpers import check_export, op_types, param, rand

from singa import autograd, layer

W = param(rand((4, 3), seed=3), "W")


B = param(rand((3,), seed=4), "b")


B_COL = param(rand((5,), seed=5), "bcol")


LINALG = [
    lambda x: autograd.matmul(x, W),
    lambda x: autograd.add_bias(autograd.matmul(x, W), B, axis=0),
    lambda x: autograd.gemm(x, W, B, alpha=0.5, beta=2.0),
    lambda x: autograd.gemm(W, x, None, transA=True, transB=True),
]


@pytest.mark.parametrize("fn", LINALG)
def test_linalg(fn):
    m = check_export(fn, lambda b: [rand((b, 4))])
    for i in m.graph.initializer:
        assert i.name in {"W", "b"}


def test_batched_matmul_and_add_bias_columns():
    check_export(lambda x: autograd.matmul(x, autograd.transpose(x, (0, 2, 1))), lambda b: [rand((b, 3, 4))])
    check_export(
        lambda x: autograd.add_bias(x, B_COL, axis=1),
        lambda b: [rand((5, 2))],
        batches=(5,),
        dynamic_batch=False,
    )


def test_matmul_then_add_bias_is_one_gemm_where_it_can_be():
    """layer.Linear's matmul + add_bias is one Gemm (one layer for last_layers, as
    PyTorch's nn.Linear); not when the product is used elsewhere, is 3-D, or the bias
    is added along columns."""
    fused = check_export(
        lambda x: autograd.add_bias(autograd.matmul(x, W), B, axis=0), lambda b: [rand((b, 4))]
    )
    assert op_types(fused) == ["Gemm"]
    assert list(fused.graph.node[0].input) == ["input", "W", "b"]
    assert op_types(check_export(layer.Linear(3), lambda b: [rand((b, 4))])) == ["Gemm"]

    def twice(x):
        h = autograd.matmul(x, W)
        return autograd.add(autograd.add_bias(h, B, axis=0), h)

    assert op_types(check_export(twice, lambda b: [rand((b, 4))]))[:2] == ["MatMul", "Add"]
    assert op_types(check_export(layer.Linear(3), lambda b: [rand((b, 2, 4))])) == ["MatMul", "Add"]
    w_col = param(rand((4, 5), seed=6))
    cols = check_export(
        lambda x: autograd.add_bias(autograd.matmul(x, w_col), B_COL, axis=1),
        lambda b: [rand((5, 4))],
        batches=(5,),
        dynamic_batch=False,
    )
    assert "Gemm" not in op_types(cols)
