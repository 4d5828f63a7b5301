"""Small models and data for the fit / callbacks / summary tests."""

from __future__ import annotations

import numpy as np

from singa import autograd, device, layer, model, opt, tensor


class MLP(model.Model):
    """Linear -> ReLU -> Linear with softmax cross-entropy (no BatchNorm)."""

    def __init__(self, hidden=16, classes=3):
        super().__init__()
        self.l1 = layer.Linear(hidden)
        self.relu = layer.ReLU()
        self.l2 = layer.Linear(classes)
        self.loss_fn = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        return self.l2(self.relu(self.l1(x)))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss_fn(out, y)
        self.optimizer(loss)
        return out, loss


class CNN(model.Model):
    """Conv2d -> ReLU -> max-pool -> flatten -> Linear (no BatchNorm)."""

    def __init__(self, classes=3):
        super().__init__()
        self.conv = layer.Conv2d(4, 3, padding=1)
        self.relu = layer.ReLU()
        self.pool = layer.MaxPool2d(2)
        self.flat = layer.Flatten()
        self.fc = layer.Linear(classes)
        self.loss_fn = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        return self.fc(self.flat(self.pool(self.relu(self.conv(x)))))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss_fn(out, y)
        self.optimizer(loss)
        return out, loss


class Regressor(model.Model):
    """One Linear layer trained with the mean squared error."""

    def __init__(self, outputs=2):
        super().__init__()
        self.l1 = layer.Linear(outputs)

    def forward(self, x):
        return self.l1(x)

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.mse_loss(out, y)
        self.optimizer(loss)
        return out, loss


def classification(n=128, d=8, classes=3, seed=0):
    """Separable-ish data: labels from the first features."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = ((x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0.5)).astype(np.int32) % classes
    return x, y


def images(n=64, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 1, 8, 8)).astype(np.float32)
    y = (x[:, 0, :4].mean(axis=(1, 2)) > 0).astype(np.int32)
    return x, y


def made(cls=MLP, lr=0.1, momentum=0.9, seed=0, **kw):
    """A fresh model with an SGD optimizer; the device generator seeded."""
    device.get_default_device().set_rand_seed(seed)
    m = cls(**kw)
    m.set_optimizer(opt.SGD(lr, momentum=momentum))
    return m


def params(m):
    return {k: v.to_numpy() for k, v in m.get_states().items()}


def hand_loop(m, x, y, batch_size, epochs, seed, use_graph=True):
    """The loop fit replaces, written out: compile on the first batch's shape, then the
    seeded permutation of each epoch, batch by batch."""
    dev = device.get_default_device()
    first = tensor.from_numpy(x[:batch_size], dev)
    m.compile([first], is_train=True, use_graph=use_graph)
    for e in range(epochs):
        order = np.random.default_rng([seed, e]).permutation(len(x))
        for lo in range(0, len(x), batch_size):
            idx = order[lo : lo + batch_size]
            m(tensor.from_numpy(x[idx], dev), tensor.from_numpy(y[idx], dev))
