"""Activation layers (singa/layer/activation.py) against numpy."""

import numpy as np
import pytest
from layer_helpers import t64

from singa import autograd, layer, tensor

X = np.random.default_rng(0).standard_normal((3, 4))


@pytest.mark.parametrize(
    "lay,ref",
    [
        (layer.ReLU(), lambda x: np.maximum(x, 0)),
        (layer.LeakyReLU(0.2), lambda x: np.where(x >= 0, x, 0.2 * x)),
        (layer.Sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
        (layer.Tanh(), np.tanh),
        (layer.SoftMax(), lambda x: np.exp(x) / np.exp(x).sum(1, keepdims=True)),
        (layer.SoftMax(axis=0), lambda x: np.exp(x) / np.exp(x).sum(0, keepdims=True)),
        (layer.HardSwish(), lambda x: x * np.clip(x + 3, 0, 6) / 6),
        (layer.Mish(), lambda x: x * np.tanh(np.log1p(np.exp(x)))),
    ],
)
def test_activation_layers(lay, ref):
    y = lay(t64(X))
    np.testing.assert_allclose(y.to_numpy(), ref(X), rtol=1e-12)
    assert lay.get_states() == {}


def test_gelu_and_silu_layers():
    x = np.random.default_rng(0).standard_normal((3, 4))
    np.testing.assert_array_equal(
        layer.GELU("tanh")(tensor.from_numpy(x)).to_numpy(),
        autograd.gelu(tensor.from_numpy(x), "tanh").to_numpy(),
    )
    np.testing.assert_allclose(
        layer.SiLU()(tensor.from_numpy(x)).to_numpy(), x / (1 + np.exp(-x)), rtol=1e-12
    )
    with pytest.raises(ValueError, match="approximate"):
        layer.GELU("fast")
