"""ONNX export of silu (Mul of Sigmoid), checked by onnxruntime at two batch sizes and
imported back by our importer."""

import numpy as np
from sonnx_helpers import check_export, op_types, rand

from singa import autograd, sonnx, tensor


def test_silu_exports_and_imports():
    model = check_export(autograd.silu, lambda b: [rand((b, 3, 4))])
    assert [t for t in op_types(model) if t != "Constant"] == ["Sigmoid", "Mul"]
    x = rand((2, 3, 4))
    (got,) = sonnx.prepare(model).run([x])
    np.testing.assert_allclose(got, autograd.silu(tensor.from_numpy(x)).to_numpy(), rtol=1e-6)
