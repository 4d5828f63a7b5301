"""bfloat16 nodes compute in float32 and round their float results to bfloat16."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from sonnx_helpers import run_node_model


def test_bfloat16_arithmetic_rounds_float32_results():
    a = np.array([1.0, 2.5, -3.0], ml_dtypes.bfloat16)
    b = np.array([0.1, 0.2, 0.3], ml_dtypes.bfloat16)
    (got,) = run_node_model("Mul", {"a": a, "b": b})
    assert got.dtype == ml_dtypes.bfloat16
    want = (a.astype(np.float32) * b.astype(np.float32)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
    (idx,) = run_node_model("ArgMax", {"a": a}, keepdims=0)
    assert idx.dtype == np.int64 and int(idx) == 1
