"""ONNX export (checked by onnxruntime) and import of Einsum."""

from __future__ import annotations

import numpy as np
import pytest
from sonnx_helpers import check_export, op_types, rand, run_node_model

from singa import autograd, tensor


@pytest.mark.parametrize("eq", ["bij,jk->bik", "...j,kj", "bij->b"])
def test_einsum_exports_and_imports(eq):
    w = rand((4, 4), seed=3)
    others = [tensor.from_numpy(w)] if "," in eq else []
    model = check_export(lambda x: autograd.einsum(eq, x, *others), lambda b: [rand((b, 3, 4))])
    assert "Einsum" in op_types(model)
    x = rand((2, 3, 4))
    ins = {"x": x, "c_w": w} if "," in eq else {"x": x}
    (got,) = run_node_model("Einsum", ins, equation=eq)
    np.testing.assert_allclose(got, np.einsum(eq, *ins.values()), rtol=1e-5, atol=1e-6)
