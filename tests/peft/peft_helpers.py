"""Shared pieces of the peft tests: small models and numpy twins of the LoRA layers."""

from __future__ import annotations

import numpy as np

from singa import layer, model
from singa.tensor import Tensor


def t32(a, requires_grad: bool = False) -> Tensor:
    """A float32 tensor of ``a``."""
    return Tensor(data=np.asarray(a, np.float32), requires_grad=requires_grad)


class MLP(model.Model):
    """SINGA's example MLP (``examples/model/mlp.py`` of singa_peft), with SINGA's
    ``train_one_batch(x, y, dist_option, spars)``."""

    def __init__(self, in_features: int = 6, hidden: int = 5, num_classes: int = 3):
        super().__init__()
        self.dimension = 2
        self.relu = layer.ReLU()
        self.linear1 = layer.Linear(in_features, hidden, bias=True)
        self.linear2 = layer.Linear(hidden, num_classes, bias=True)
        self.softmax_cross_entropy = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        return self.linear2(self.relu(self.linear1(x)))

    def train_one_batch(self, x, y, dist_option="plain", spars=None):
        out = self.forward(x)
        loss = self.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


class ConvNet(model.Model):
    """Two convolutions (one lazily sized, one SAME-padded with stride 2), a
    BatchNorm, nested blocks in a list, and a Linear head."""

    def __init__(self, num_classes: int = 3):
        super().__init__()
        self.conv1 = layer.Conv2d(4, 3, padding=1)
        self.bn1 = layer.BatchNorm2d(4)
        self.blocks = [layer.Conv2d(4, 3, stride=2, pad_mode="SAME_UPPER"), layer.ReLU()]
        self.flatten = layer.Flatten()
        self.fc = layer.Linear(num_classes)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        y = self.bn1(self.conv1(x))
        for b in self.blocks:
            y = b(y)
        return self.fc(self.flatten(y))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


def conv2d_np(x: np.ndarray, w: np.ndarray, stride=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1)) -> np.ndarray:
    """NCHW cross-correlation in float64 (pads are top, left, bottom, right)."""
    t, l, b, r = pads
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (t, b), (l, r)))
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    eh, ew = (kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1
    oh, ow = (h - eh) // stride[0] + 1, (wd - ew) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, :, i * dilation[0] :, j * dilation[1] :][
                :, :, : oh * stride[0] : stride[0], : ow * stride[1] : stride[1]
            ]
            out += np.einsum("nchw,oc->nohw", patch[:, :, :oh, :ow], w[:, :, i, j].astype(np.float64))
    return out


def lora_linear_np(x, W, b, A, B, scaling):
    """The LoRA Linear twin: ``x @ W + b + scaling * x @ A.T @ B.T`` in float64."""
    x = x.astype(np.float64)
    return x @ W + b + scaling * (x @ A.T) @ B.T
