"""Parameter-free layers: activations, shape layers and losses against numpy."""

import numpy as np
import pytest
from layer_helpers import t64

from singa import autograd, layer
from singa.tensor import Tensor

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
        (layer.Flatten(), lambda x: x),
        (layer.Flatten(0), lambda x: x.reshape(1, -1)),
        (layer.Reshape((2, 6)), lambda x: x.reshape(2, 6)),
    ],
)
def test_unary_layers(lay, ref):
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


def test_loss_layers():
    p = 1 / (1 + np.exp(-X))
    t_idx = np.array([0, 3, 1])
    onehot = np.eye(4)[t_idx]
    logp = X - np.log(np.exp(X).sum(1, keepdims=True))
    sce = layer.SoftMaxCrossEntropy()(t64(X), Tensor(data=t_idx, dtype=np.int64, requires_grad=False))
    assert sce.shape == (1,)
    np.testing.assert_allclose(sce.to_numpy()[0], -logp[np.arange(3), t_idx].mean(), rtol=1e-12)
    ce = layer.CrossEntropy()(t64(np.exp(logp)), t64(onehot))
    np.testing.assert_allclose(ce.to_numpy()[0], -logp[np.arange(3), t_idx].mean(), rtol=1e-10)
    mse = layer.MeanSquareError()(t64(X), t64(np.zeros_like(X)))
    assert mse.shape == (1,)
    np.testing.assert_allclose(mse.to_numpy()[0], (X**2).mean(), rtol=1e-12)
    tb = (X > 0).astype(np.float64)
    bce = layer.BinaryCrossEntropy()(t64(p), t64(tb))
    ref = -(tb * np.log(p) + (1 - tb) * np.log(1 - p)).mean()
    np.testing.assert_allclose(bce.to_numpy()[0], ref, rtol=1e-10)


def test_losses_backpropagate_to_a_linear_layer():
    prev = autograd.training
    autograd.training = True
    try:
        fc = layer.Linear(4)
        loss = layer.SoftMaxCrossEntropy()(fc(t64(X)), Tensor(data=np.array([0, 1, 2]), requires_grad=False))
        grads = dict(autograd.backward(loss))
        assert set(grads) == {fc.W, fc.b}
    finally:
        autograd.training = prev
