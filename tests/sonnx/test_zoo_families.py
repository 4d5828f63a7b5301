"""The families of SINGA's ONNX examples, end to end at their original opsets (7-10):
``prepare`` + ``run`` match onnxruntime, and a SONNXModel subclass fine-tunes."""

from __future__ import annotations

import numpy as np
import pytest
from sonnx_helpers import session
from zoo_families import CLASSES, FAMILIES, inputs

from singa import autograd, device, opt, sonnx, tensor

pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_matches_onnxruntime(family):
    m = FAMILIES[family]()
    assert m.opset_import[0].version < sonnx.backend.MIN_IMPORT_OPSET
    x = inputs(m)
    (want,) = session(m).run(None, {"x": x})
    (got,) = sonnx.prepare(m).run([x])
    assert got.shape == want.shape == (x.shape[0], CLASSES)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


class FineTune(sonnx.SONNXModel):
    """SINGA's documented subclass: class scores, softmax cross-entropy."""

    def forward(self, *x):
        return super().forward(*x)[0]

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_fine_tunes(family):
    device.get_default_device().set_rand_seed(0)
    m = FAMILIES[family]()
    net = FineTune(m)
    net.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    x = tensor.from_numpy(inputs(m))
    y = tensor.from_numpy(np.array([1, 3], np.int32))
    net.compile([x], is_train=True, use_graph=False)
    net.train()
    losses = [float(net(x, y)[1].to_numpy().ravel()[0]) for _ in range(6)]
    assert losses[-1] < losses[0], losses
