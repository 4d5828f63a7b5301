"""Cast: forward against numpy's astype, gradient against finite differences, ONNX."""

import sys
from pathlib import Path

import numpy as np
import pytest

from singa import autograd, tensor
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sonnx"))


@pytest.mark.parametrize("to", [np.float16, np.float32, np.float64])
def test_forward_is_astype(to):
    a = np.random.default_rng(0).standard_normal((3, 4)) * 100
    y = autograd.cast(Tensor(a.shape, dtype=tensor.float64, data=a), to)
    assert y.dtype == to
    np.testing.assert_array_equal(y.to_numpy(), a.astype(to))


def test_gradient_in_float64():
    gradcheck(lambda x: autograd.mul(autograd.cast(x, np.float64), x), [np.random.randn(3, 4)])


def test_gradient_comes_back_in_the_input_dtype():
    x = Tensor(data=np.ones((2, 3), np.float32), requires_grad=True, stores_grad=True)
    autograd.training = True
    try:
        y = autograd.reduce_sum(autograd.cast(x, np.float16))
        (g,) = dict(autograd.backward(y)).values()
    finally:
        autograd.training = False
    assert g.dtype == np.float32 and np.all(g.to_numpy() == 1)


def test_only_floating_dtypes():
    with pytest.raises(ValueError, match="floating"):
        autograd.cast(Tensor(data=np.ones(2, np.float32)), np.int32)


def test_onnx_export():
    from sonnx_helpers import check_export, op_types, rand

    fn = lambda x: autograd.cast(x, np.float16)  # noqa: E731
    assert "Cast" in op_types(check_export(fn, lambda b: [rand((b, 4))], tol=1e-3))
