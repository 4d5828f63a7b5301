"""ONNX export and import of rms_norm: the decomposition before opset 23 and
RMSNormalization from 23, checked by onnxruntime at two batch sizes, and imported back."""

import numpy as np
import pytest
from sonnx_helpers import check_export, op_types, rand

from singa import autograd, sonnx, tensor


@pytest.mark.parametrize("opset", [13, 17, 18, 23])
@pytest.mark.parametrize("with_scale", [True, False])
def test_rms_norm_exports(opset, with_scale):
    scale = tensor.from_numpy(rand((4, 5), seed=3)) if with_scale else None

    def fn(x):
        return autograd.rms_norm(x, scale, axis=1, eps=1e-5)

    model = check_export(fn, lambda b: [rand((b, 4, 5))], opset=opset)
    assert ("RMSNormalization" in op_types(model)) == (opset >= 23)
    x = rand((2, 4, 5))
    (got,) = sonnx.prepare(model).run([x])
    np.testing.assert_allclose(got, fn(tensor.from_numpy(x)).to_numpy(), rtol=1e-5, atol=1e-6)
