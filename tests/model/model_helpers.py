"""Small models for the Model/graph tests, built from singa.autograd functions."""

import numpy as np

from singa import autograd, device, layer, model
from singa.tensor import Tensor


def param(rng, shape, scale=0.3):
    return Tensor(data=rng.standard_normal(shape) * scale, requires_grad=True, stores_grad=True)


class MLP(model.Model):
    """784-ish MLP: matmul, add_bias, relu, softmax_cross_entropy."""

    def __init__(self, din=6, hidden=8, classes=3, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.w0 = param(rng, (din, hidden))
        self.b0 = param(rng, (hidden,), 0.1)
        self.w1 = param(rng, (hidden, classes))
        self.b1 = param(rng, (classes,), 0.1)

    def forward(self, x):
        h = autograd.relu(autograd.add_bias(autograd.matmul(x, self.w0), self.b0))
        return autograd.add_bias(autograd.matmul(h, self.w1), self.b1)

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


class CNN(model.Model):
    """conv -> batchnorm -> relu -> dropout -> max-pool -> conv -> relu -> linear."""

    def __init__(self, cin=2, classes=3, seed=0, ratio=0.3, hw=8, width=4):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.ratio = ratio
        c = width
        self.c1 = param(rng, (c, cin, 3, 3))
        self.c1b = param(rng, (c,), 0.1)
        self.scale = Tensor(data=1 + rng.standard_normal(c) * 0.1, requires_grad=True, stores_grad=True)
        self.shift = param(rng, (c,), 0.1)
        self.running_mean = Tensor(data=np.zeros(c), requires_grad=False)
        self.running_var = Tensor(data=np.ones(c), requires_grad=False)
        self.c2 = param(rng, (5, c, 3, 3))
        self.fc = param(rng, (5 * (hw // 4) ** 2, classes))
        self.fcb = param(rng, (classes,), 0.1)

    def forward(self, x):
        y = autograd.conv2d(x, self.c1, self.c1b, padding=1)
        y = autograd.batchnorm_2d(
            y, self.scale, self.shift, self.running_mean, self.running_var, training=self.training
        )
        y = autograd.relu(y)
        y = autograd.dropout(y, self.ratio, training=self.training)
        y = autograd.max_pool_2d(y, 2)
        y = autograd.relu(autograd.conv2d(y, self.c2, stride=2, padding=1))
        y = autograd.flatten(y)
        return autograd.add_bias(autograd.matmul(y, self.fc), self.fcb)

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def batches(n, shape, classes, seed=1, sizes=None):
    """n (x, y) numpy batches; ``sizes`` overrides the batch size per step."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        b = sizes[i] if sizes else shape[0]
        out.append(
            (rng.standard_normal((b,) + tuple(shape[1:])).astype(np.float32), rng.integers(0, classes, b))
        )
    return out


def run(make_model, make_opt, data, use_graph, sequential=False, placeholder=True, seed=7, hook=None):
    """Train on ``data``; returns (losses, outputs, final states, model). With
    ``placeholder`` the inputs are refilled with copy_from_numpy when the shape stays,
    otherwise new Tensors are passed every step. ``hook(i, m)`` runs before step i."""
    device.get_default_device().set_rand_seed(seed)
    m = make_model()
    m.set_optimizer(make_opt())
    x0, y0 = data[0]
    tx = Tensor(x0.shape)
    ty = Tensor(y0.shape, dtype=np.int32, requires_grad=False)
    m.compile([tx], is_train=True, use_graph=use_graph, sequential=sequential)
    losses, outs = [], []
    for i, (x, y) in enumerate(data):
        if hook is not None:
            hook(i, m)
        if placeholder and x.shape == tx.shape:
            tx.copy_from_numpy(x)
            ty.copy_from_numpy(y)
            args = (tx, ty)
        else:
            args = (Tensor(data=x), Tensor(data=y, dtype=np.int32, requires_grad=False))
        out, loss = m(*args)
        losses.append(loss.to_numpy())
        outs.append(out.to_numpy())
    states = {k: v.to_numpy() for k, v in m.get_states().items()}
    return losses, outs, states, m


def assert_same(a, b):
    """Bitwise equality of two ``run`` results."""
    la, oa, sa, _ = a
    lb, ob, sb, _ = b
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        np.testing.assert_array_equal(x, y)
    for x, y in zip(oa, ob):
        np.testing.assert_array_equal(x, y)
    assert sa.keys() == sb.keys()
    for k in sa:
        np.testing.assert_array_equal(sa[k], sb[k], err_msg=k)


class SmallCNN(model.Model):
    """The MNIST CNN's shape, small: conv-relu-pool twice, linear-relu, linear."""

    def __init__(self, hw=16, width=8, classes=10, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.c1, self.b1 = param(rng, (width, 1, 5, 5), 0.2), param(rng, (width,), 0.1)
        self.c2, self.b2 = param(rng, (2 * width, width, 5, 5), 0.1), param(rng, (2 * width,), 0.1)
        self.w3, self.b3 = param(rng, (2 * width * (hw // 4) ** 2, 32), 0.1), param(rng, (32,), 0.1)
        self.w4, self.b4 = param(rng, (32, classes), 0.1), param(rng, (classes,), 0.1)

    def forward(self, x):
        h = autograd.max_pool_2d(autograd.relu(autograd.conv2d(x, self.c1, self.b1, padding=2)), 2)
        h = autograd.max_pool_2d(autograd.relu(autograd.conv2d(h, self.c2, self.b2, padding=2)), 2)
        h = autograd.relu(autograd.add_bias(autograd.matmul(autograd.flatten(h), self.w3), self.b3))
        return autograd.add_bias(autograd.matmul(h, self.w4), self.b4)

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


class LayerMLP(model.Model):
    """SINGA's documented Model-API MLP, with singa.layer layers."""

    def __init__(self, perceptron_size=10, num_classes=3):
        super().__init__()
        self.relu = layer.ReLU()
        self.linear1 = layer.Linear(perceptron_size)
        self.linear2 = layer.Linear(num_classes)
        self.softmax_cross_entropy = layer.SoftMaxCrossEntropy()

    def forward(self, inputs):
        y = self.linear1(inputs)
        y = self.relu(y)
        return self.linear2(y)

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss

    def set_optimizer(self, optimizer):
        self.optimizer = optimizer


class ResBlock(layer.Layer):
    """A BasicBlock: conv-bn-relu-conv-bn plus the (projected) input, relu."""

    def __init__(self, channels, stride=1):
        super().__init__()
        self.conv1 = layer.Conv2d(channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = layer.BatchNorm2d()
        self.conv2 = layer.Conv2d(channels, 3, padding=1, bias=False)
        self.bn2 = layer.BatchNorm2d()
        self.relu = layer.ReLU()
        self.add = layer.Add()
        self.stride = stride
        self.proj = None

    def initialize(self, x):
        if self.stride != 1 or x.shape[1] != self.conv1.nb_kernels:
            self.proj = layer.Conv2d(self.conv1.nb_kernels, 1, stride=self.stride, bias=False)
            self.proj_bn = layer.BatchNorm2d()

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        skip = self.proj_bn(self.proj(x)) if self.proj is not None else x
        return self.relu(self.add(y, skip))


class LayerCNN(model.Model):
    """Conv2d, BatchNorm2d, Dropout, MaxPool2d, residual blocks, Linear (lazy sizes)."""

    def __init__(self, classes=3):
        super().__init__()
        self.conv = layer.Conv2d(4, 3, padding=1)
        self.bn = layer.BatchNorm2d()
        self.relu = layer.ReLU()
        self.drop = layer.Dropout(0.25)
        self.pool = layer.MaxPool2d(2, 2)
        self.blocks = [ResBlock(4), ResBlock(6, stride=2)]
        self.flatten = layer.Flatten()
        self.fc = layer.Linear(classes)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        y = self.pool(self.drop(self.relu(self.bn(self.conv(x)))))
        for b in self.blocks:
            y = b(y)
        return self.fc(self.flatten(y))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss
