"""Losses (training graphs): ONNX export checked by onnxruntime at two batch sizes (and, where
the test says so, imported back with ``sonnx.prepare`` and run against our output)."""

from __future__ import annotations

import numpy as np
import pytest
from sonnx_helpers import check_export, param, rand, session

from singa import autograd, layer, model, sonnx, tensor

LW = param(rand((6, 4), seed=13), "fc.W")


def logits(x):
    return autograd.matmul(x, LW)


LOSSES = [
    ("sce-index", lambda x, t: autograd.softmax_cross_entropy(logits(x), t), "index"),
    ("sce-onehot", lambda x, t: autograd.softmax_cross_entropy(logits(x), t), "onehot"),
    ("ce-index", lambda x, t: autograd.cross_entropy(autograd.softmax(logits(x)), t), "index"),
    ("ce-onehot", lambda x, t: autograd.cross_entropy(autograd.softmax(logits(x)), t), "onehot"),
    ("nll", lambda x, t: autograd.nll_loss(autograd.log_softmax(logits(x), -1), t), "index"),
    ("mse", lambda x, t: autograd.mse_loss(logits(x), t), "onehot"),
    ("bce", lambda x, t: autograd.binary_cross_entropy(autograd.sigmoid(logits(x)), t), "onehot"),
]


@pytest.mark.parametrize("name,fn,labels", LOSSES, ids=[n for n, _, _ in LOSSES])
def test_loss_training_graphs(name, fn, labels):
    def make(b):
        idx = np.arange(b) % 4
        t = idx.astype(np.int32) if labels == "index" else np.eye(4, dtype=np.float32)[idx]
        return [rand((b, 6)), t]

    m = check_export(fn, make, tol=1e-5)
    assert [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim] == [1]


def test_index_labels_with_class_axis_last_on_3d_scores():
    w = param(rand((5, 3), seed=14), "w")
    check_export(
        lambda x, t: autograd.softmax_cross_entropy(autograd.matmul(x, w), t),
        lambda b: [rand((b, 2, 5)), (np.arange(2 * b).reshape(b, 2) % 3).astype(np.int64)],
    )


@pytest.mark.parametrize("name", ["softmax_cross_entropy", "cross_entropy", "nll_loss"])
def test_column_of_class_indices_exports(name):
    """(N, 1) class indices (SINGA's char-rnn labels) export with the column squeezed."""
    head = {"softmax_cross_entropy": logits, "cross_entropy": lambda x: autograd.softmax(logits(x))}
    head["nll_loss"] = lambda x: autograd.log_softmax(logits(x), -1)
    fn = getattr(autograd, name)
    check_export(
        lambda x, t: fn(head[name](x), t),
        lambda b: [rand((b, 6)), (np.arange(b) % 4).astype(np.int32).reshape(b, 1)],
        tol=1e-5,
    )


@pytest.mark.parametrize("labels", ["index", "onehot"])
def test_export_model_training_graph_with_loss(tmp_path, labels):

    class Net(model.Model):
        def __init__(self):
            super().__init__()
            self.fc1 = layer.Linear(8)
            self.bn = layer.BatchNorm2d()
            self.fc2 = layer.Linear(3)

        def forward(self, x):
            return self.fc2(autograd.relu(self.bn(self.fc1(x))))

    def make(b):
        idx = np.arange(b) % 3
        return rand((b, 5)), (idx.astype(np.int64) if labels == "index" else np.eye(3, dtype=np.float32)[idx])

    net = Net()
    x, t = make(4)
    path = tmp_path / "train.onnx"
    m = sonnx.export_model(
        net, path, [tensor.from_numpy(x)], targets=[tensor.from_numpy(t)], loss=autograd.softmax_cross_entropy
    )
    assert {i.name for i in m.graph.initializer} == set(net.get_states())
    assert [o.name for o in m.graph.output] == ["output_0", "output_1"]
    sess = session(m)
    for b in (4, 7):
        x, t = make(b)
        out, loss = sess.run(None, {"input_0": x, "input_1": t})
        net.eval()
        with autograd.no_grad():
            want = net.forward(tensor.from_numpy(x))
            want_loss = autograd.softmax_cross_entropy(want, tensor.from_numpy(t))
        np.testing.assert_allclose(out, want.to_numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(loss, want_loss.to_numpy(), rtol=1e-5, atol=1e-6)
    assert sonnx.save(m, tmp_path / "copy.onnx") is m
    again = sonnx.save(net, tmp_path / "eval.onnx", [tensor.from_numpy(x)])
    assert [o.name for o in again.graph.output] == ["output"]
