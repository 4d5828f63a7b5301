"""Shared models and helpers of the checkpoint tests (this module holds no tests)."""

import os
import signal
import time

import numpy as np
import pytest

from singa import autograd, device, layer, model, opt
from singa.data.worker_pool import frozen_for_fork
from singa.layer.base import Layer
from singa.tensor import Tensor

#: a forked child still running after this many seconds fails its test (a hang guard)
CHILD_LIMIT_S = 300


def fork_frozen():
    """``os.fork()`` inside ``singa.data.worker_pool.frozen_for_fork``, as the data
    workers start: a child that collected the garbage it inherited would run the
    parent's finalizers, and one waiting on a lock a parent thread held at the fork
    would hang. Returns the child's pid in the parent, 0 in the child."""
    with frozen_for_fork():
        return os.fork()


def wait_child(pid, limit_s=CHILD_LIMIT_S):
    """The wait status of child ``pid``. With ``limit_s`` None, None while it runs;
    else a child still running after ``limit_s`` seconds is killed and the test fails."""
    deadline = None if limit_s is None else time.monotonic() + limit_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if deadline is None:
            return None
        if time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"forked child {pid} still running after {limit_s} s")
        time.sleep(0.005)


def param(rng, shape, dtype=np.float32):
    return Tensor(
        data=rng.standard_normal(shape).astype(dtype), dtype=dtype, requires_grad=True, stores_grad=True
    )


class Leaf(Layer):
    """Eagerly created parameter, bias and buffer."""

    def __init__(self, n, m=3, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.W = param(rng, (n, m))
        self.b = param(rng, (m,))
        self.running = Tensor(data=rng.standard_normal(n).astype(np.float32), requires_grad=False)
        self._scratch = Tensor((2,))  # private: not saved


class Net(Layer):
    """States reached through a list and a dict: a.W, a.b, a.running, blocks.0.W, ..."""

    def __init__(self, seed=0):
        super().__init__()
        self.a = Leaf(2, seed=seed)
        self.blocks = [Leaf(4, seed=seed + 1)]
        self.heads = {"h": Leaf(5, 2, seed=seed + 2)}


def states_of(layer):
    return {k: t.to_numpy() for k, t in layer.get_states().items()}


def assert_states_equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        assert a[k].dtype == b[k].dtype, k


def fake_grads(layer, opt, steps=2, seed=3):
    """Run ``steps`` optimizer steps with random gradients (no model needed)."""
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        for p in layer.get_params().values():
            g = rng.standard_normal(p.shape).astype(p.dtype)
            opt.update(p, Tensor(data=g, dtype=p.dtype, device=p.device))
        opt.step()


class LazyMLP(model.Model):
    """Linear(8) -> ReLU -> Dropout -> Linear(classes): parameters created on first call."""

    def __init__(self, classes=3, ratio=0.25):
        super().__init__()
        self.fc1 = layer.Linear(8)
        self.relu = layer.ReLU()
        self.drop = layer.Dropout(ratio)
        self.fc2 = layer.Linear(classes)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        return self.fc2(self.drop(self.relu(self.fc1(x))))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


class SmallCNN(model.Model):
    """Conv2d -> BatchNorm2d -> ReLU -> Dropout -> MaxPool -> Flatten -> Linear."""

    def __init__(self, classes=3):
        super().__init__()
        self.conv = layer.Conv2d(4, 3, padding=1)
        self.bn = layer.BatchNorm2d(4)
        self.relu = layer.ReLU()
        self.drop = layer.Dropout(0.3)
        self.pool = layer.MaxPool2d(2)
        self.flat = layer.Flatten()
        self.fc = layer.Linear(classes)

    def forward(self, x):
        y = self.pool(self.drop(self.relu(self.bn(self.conv(x)))))
        return self.fc(self.flat(y))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def batches(n, shape, classes, seed=1):
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal(shape).astype(np.float32), rng.integers(0, classes, shape[0]).astype(np.int32))
        for _ in range(n)
    ]


# ----- exact resume: the same training split by a checkpoint -----------------------------------------
OPTIMIZERS = {
    "sgd": lambda: opt.SGD(0.05, momentum=0.9, weight_decay=1e-4),
    "adam": lambda: opt.Adam(opt.CosineDecay(0.01, decay_steps=20, warmup_steps=3), weight_decay=1e-3),
}
MODELS = {"mlp": (LazyMLP, (8, 5)), "cnn": (SmallCNN, (4, 2, 6, 6))}
CLASSES = 3


def build(model_name, opt_name):
    cls, shape = MODELS[model_name]
    m = cls()
    m.set_optimizer(OPTIMIZERS[opt_name]())
    tx = Tensor(shape)
    ty = Tensor((shape[0],), dtype=np.int32, requires_grad=False)
    return m, tx, ty


def train_steps(m, tx, ty, data):
    losses = []
    for x, y in data:
        tx.copy_from_numpy(x)
        ty.copy_from_numpy(y)
        _, loss = m(tx, ty)
        losses.append(loss.to_numpy())
    return losses


def final_state(m, losses):
    """Parameters, buffers, optimizer slots and step, and the losses, as arrays."""
    out = {f"state/{k}": v for k, v in states_of(m).items()}
    st = m.optimizer.get_states(m.get_params())
    out.update({f"slot/{k}": v for k, v in st["slots"].items()})
    out["step"] = np.array(st["step"])
    out["losses"] = np.array(losses)
    return out


def uninterrupted(model_name, opt_name, use_graph, ckpt, n, m_steps):
    """Train n steps, save, train m_steps more; returns final_state."""
    device.get_default_device().set_rand_seed(0)
    m, tx, ty = build(model_name, opt_name)
    data = batches(n + m_steps, MODELS[model_name][1], CLASSES)
    m.compile([tx], is_train=True, use_graph=use_graph)
    train_steps(m, tx, ty, data[:n])
    m.save_states(ckpt, aux_states={"step": n, "batches": [n, n + m_steps]})
    losses = train_steps(m, tx, ty, data[n:])
    return final_state(m, losses)


def resumed(model_name, opt_name, use_graph, load_first, ckpt, n, m_steps):
    """In a fresh process: build, load (before or after compile), train m_steps."""
    device.get_default_device().set_rand_seed(12345)  # must be overridden by the checkpoint
    m, tx, ty = build(model_name, opt_name)
    data = batches(n + m_steps, MODELS[model_name][1], CLASSES)
    if load_first:
        aux = m.load_states(ckpt)
    m.compile([tx], is_train=True, use_graph=use_graph)
    if not load_first:
        aux = m.load_states(ckpt)
    assert aux == {"step": n, "batches": [n, n + m_steps]}
    assert not aux.report and not aux.report.pending
    losses = train_steps(m, tx, ty, data[aux["step"] :])
    return final_state(m, losses)


def resumed_main(argv):
    """Entry point of the fresh process: argv = model opt graph load_first ckpt out n m."""
    model_name, opt_name, graph, load_first, ckpt, out, n, m_steps = argv
    res = resumed(model_name, opt_name, graph == "1", load_first == "1", ckpt, int(n), int(m_steps))
    np.savez(out, **res)
