"""Loss layers (singa/layer/loss.py) against numpy."""

import numpy as np
from layer_helpers import t64

from singa import autograd, layer
from singa.tensor import Tensor

X = np.random.default_rng(0).standard_normal((3, 4))


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
