"""ONNX export (checked by onnxruntime) and import of ReduceProd and CumProd."""

from __future__ import annotations

import numpy as np
import pytest
from sonnx_helpers import check_export, op_types, rand, run_node_model

from singa import autograd


@pytest.mark.parametrize("opset", [13, 18])
def test_reduce_prod_exports_and_imports(opset):
    model = check_export(lambda x: autograd.reduce_prod(x, [1], 0), lambda b: [rand((b, 3, 2))], opset=opset)
    assert "ReduceProd" in op_types(model)
    x = rand((2, 3, 2))
    (got,) = run_node_model("ReduceProd", {"x": x, "c_a": np.array([0, 2])}, keepdims=1)
    np.testing.assert_allclose(got, np.prod(x, axis=(0, 2), keepdims=True), rtol=1e-6)


def test_cumprod_imports_and_refuses_old_opsets_on_export():
    x = rand((2, 4))
    (got,) = run_node_model("CumProd", {"x": x, "c_a": np.array(1)}, opset=26, reverse=1)
    np.testing.assert_allclose(got, np.cumprod(x[:, ::-1], 1)[:, ::-1], rtol=1e-6)
    from singa import sonnx, tensor

    with pytest.raises(sonnx.ExportError, match="CumProd needs opset 26"):
        sonnx.to_onnx([tensor.from_numpy(x)], lambda t: autograd.cumprod(t, 1), opset=18)
