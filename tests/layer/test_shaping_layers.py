"""Shape and merging layers (singa/layer/shaping.py, singa/layer/merge.py) against numpy."""

import numpy as np
import pytest
from layer_helpers import t64

from singa import layer

X = np.random.default_rng(0).standard_normal((3, 4))


@pytest.mark.parametrize(
    "lay,ref",
    [
        (layer.Flatten(), lambda x: x),
        (layer.Flatten(0), lambda x: x.reshape(1, -1)),
        (layer.Reshape((2, 6)), lambda x: x.reshape(2, 6)),
    ],
)
def test_shape_layers(lay, ref):
    y = lay(t64(X))
    np.testing.assert_allclose(y.to_numpy(), ref(X), rtol=1e-12)
    assert lay.get_states() == {}


def test_shape_layers_with_several_inputs():
    a, b = t64(X), t64(X * 2)
    np.testing.assert_array_equal(layer.Cat(1)([a, b]).to_numpy(), np.concatenate([X, 2 * X], 1))
    np.testing.assert_array_equal(layer.Cat()((a, b)).to_numpy(), np.concatenate([X, 2 * X], 0))
    np.testing.assert_array_equal(layer.Add()(a, b).to_numpy(), 3 * X)
    np.testing.assert_array_equal(layer.Reshape()(a, (4, 3)).to_numpy(), X.reshape(4, 3))
    x4 = np.arange(24.0).reshape(2, 3, 2, 2)
    assert layer.Flatten()(t64(x4)).shape == (2, 12) and layer.Flatten(2)(t64(x4)).shape == (6, 4)
    with pytest.raises(ValueError, match="no shape"):
        layer.Reshape()(a)
