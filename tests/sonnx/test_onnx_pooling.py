"""Pooling (2-D): ONNX export checked by onnxruntime at two batch sizes (and, where
the test says so, imported back with ``sonnx.prepare`` and run against our output)."""

from __future__ import annotations

import pytest
from sonnx_helpers import check_export, rand

from singa import autograd


@pytest.mark.parametrize("opset", [11, 22])
def test_pooling_ceil_mode_grid(opset):
    """Ceil mode drops a last window that starts beyond the input and its begin padding
    (PyTorch's rule); older ONNX keeps it, so the exporter rewrites those cases."""
    import itertools

    for k, s, p, cip, h, w in itertools.product(
        (2, 3), (2, 3), (0, (1, 0, 0, 1)), (False, True), (5, 6), (5, 6)
    ):
        make = lambda b, h=h, w=w: [rand((b, 2, h, w))]  # noqa: E731
        avg = lambda x, k=k, s=s, p=p, c=cip: autograd.avg_pool_2d(x, k, s, p, True, c)  # noqa: E731
        check_export(avg, make, tol=1e-5, opset=opset)
        if cip:
            mx = lambda x, k=k, s=s, p=p: autograd.max_pool_2d(x, k, s, p, True)  # noqa: E731
            check_export(mx, make, tol=1e-5, opset=opset)
