"""Activation layers (singa/layer/activation.py) against numpy."""

import numpy as np
import pytest
from layer_helpers import t64

from singa import layer

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
    ],
)
def test_activation_layers(lay, ref):
    y = lay(t64(X))
    np.testing.assert_allclose(y.to_numpy(), ref(X), rtol=1e-12)
    assert lay.get_states() == {}
