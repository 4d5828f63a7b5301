"""torchvision's models as stored graphs (``stored_graphs``: exported by
``torch.onnx.export`` at opset 17, weights stripped and refilled with the same
statistics), checked without torch or torchvision: ``sonnx.prepare`` loads each, its
outputs equal onnxruntime's (max abs difference <= 1e-4 times the output scale) at
batch 1 and 2, and an imported ResNet-18 fine-tunes with its loss going down. The
224x224 transformers are marked slow."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import stored_graphs
from sonnx_helpers import session

from singa import autograd, opt, sonnx, tensor

SLOW = {"vit_b_16", "swin_t", "maxvit_t"}
EXPECTED = {
    "resnet18", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "regnet_y_400mf",
    "convnext_tiny", "densenet121", "shufflenet_v2_x0_5", "squeezenet1_0", "googlenet",
    "vit_b_16", "swin_t", "maxvit_t", "fcn_resnet50", "deeplabv3_mobilenet_v3_large",
    "fasterrcnn_resnet50_fpn_backbone",
}  # fmt: skip


def _params(names):
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in names]


def test_every_model_is_stored():
    assert set(stored_graphs.names()) == EXPECTED


@pytest.mark.parametrize("name", _params(sorted(EXPECTED)))
def test_stored_model_matches_onnxruntime(name):
    model = stored_graphs.load(name)
    shape = stored_graphs.input_shape(model)
    sess, rep = session(model), sonnx.prepare(model)
    for n in (1, 2):
        x = np.random.default_rng(n).standard_normal((n, *shape)).astype(np.float32)
        wants = sess.run(None, {model.graph.input[0].name: x})
        gots = rep.run([x])
        assert len(gots) == len(wants)
        for got, want in zip(gots, wants, strict=True):
            assert got.shape == want.shape
            scale = max(1.0, float(np.abs(want).max()))
            assert float(want.std()) > 1e-3, "the output does not depend on the input"
            err = float(np.abs(got - want).max())
            assert err <= 1e-4 * scale, f"{name}: max abs diff {err:.3g} (scale {scale:.3g})"


def test_fill_keeps_small_initializers_and_the_statistics():
    stripped = stored_graphs.read("resnet18")
    kept = [i for i in stripped.graph.initializer if not i.doc_string.startswith(stored_graphs.MARK)]
    emptied = [i for i in stripped.graph.initializer if i.doc_string.startswith(stored_graphs.MARK)]
    assert kept and emptied and all(not i.raw_data for i in emptied)
    filled = stored_graphs.fill(stripped, seed=4)
    again = stored_graphs.fill(stripped, seed=4)
    by_name = {i.name: onnx.numpy_helper.to_array(i) for i in filled.graph.initializer}
    for init, twin in zip(filled.graph.initializer, again.graph.initializer, strict=True):
        assert init.SerializeToString() == twin.SerializeToString()
    for init in kept:
        np.testing.assert_array_equal(by_name[init.name], onnx.numpy_helper.to_array(init))
    for init in emptied:
        values = by_name[init.name]
        assert values.shape == tuple(init.dims)
        stats = json.loads(init.doc_string[len(stored_graphs.MARK) :])
        assert values.min() >= stats["min"] and values.max() <= stats["max"]
        assert abs(values.std() - stats["std"]) <= 0.25 * stats["std"] + 1e-6


def test_an_imported_torchvision_resnet18_fine_tunes():
    model = stored_graphs.load("resnet18")
    m = sonnx.SONNXModel(model)
    m.set_optimizer(opt.SGD(lr=0.001, momentum=0.9))
    m.train()
    rng = np.random.default_rng(3)
    x = tensor.from_numpy(rng.standard_normal((4, *stored_graphs.input_shape(model))).astype(np.float32))
    y = tensor.from_numpy(np.array([1, 7, 3, 9]))
    losses = []
    for _ in range(5):
        (out,) = m.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        m.optimizer(loss)
        losses.append(float(loss.to_numpy().reshape(-1)[0]))
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert losses[-1] < 0.7 * losses[0], losses
