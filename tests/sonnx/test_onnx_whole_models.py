"""Whole models exported by torch.onnx.export at opsets 13 to 18: ``sonnx.prepare``
loads each, its outputs equal onnxruntime's (atol 1e-4 relative to the output scale),
and an imported model fine-tunes with its loss going down. Small torch.nn models (a
ResNet block net, a MobileNet-style depthwise net, a ViT-style attention net, an
upsampling segmentation head) always run when torch imports; torchvision's models
(slow), segmentation models and a detection backbone when torchvision imports too.
Without torch everything here skips: the operators are checked one by one without it
(the node cases and test_onnx_*.py), and the torchvision models as stored graphs
(test_onnx_stored_models.py)."""

from __future__ import annotations

import numpy as np
import pytest

try:
    import torch  # noqa: F401
    import whole_models
except Exception:  # any import failure (a CUDA wheel on a CPU machine ...) skips
    pytest.skip("torch is not importable", allow_module_level=True)

from sonnx_helpers import session

from singa import autograd, opt, sonnx, tensor

OPSETS = [13, 14, 15, 16, 17, 18]


def _compare(model_bytes: bytes, x: np.ndarray) -> None:
    import onnx

    proto = onnx.load_from_string(model_bytes)
    wants = session(proto).run(None, {"x": x})
    gots = sonnx.prepare(proto).run([x])
    assert len(gots) == len(wants)
    for got, want in zip(gots, wants, strict=True):
        assert got.shape == want.shape
        scale = max(1.0, float(np.abs(want).max()))
        err = float(np.abs(got - want).max())
        assert err <= 1e-4 * scale, f"max abs diff {err:.3g} (scale {scale:.3g})"


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("name", ["resnet_blocks", "mobilenet_like", "vit_like", "segmentation_head"])
def test_small_models_match_onnxruntime(name, opset):
    make, shape = whole_models.small_models()[name]
    try:
        model_bytes = whole_models.export(make(), shape, opset)
    except torch.onnx.errors.UnsupportedOperatorError as e:  # e.g. attention before opset 14
        pytest.skip(f"torch does not export this model at opset {opset}: {str(e).splitlines()[0]}")
    for n in (1, 3):
        _compare(model_bytes, whole_models.batch(shape, n, seed=n))


def test_an_imported_resnet_fine_tunes():
    make, shape = whole_models.small_models()["resnet_blocks"]
    import onnx

    m = sonnx.SONNXModel(onnx.load_from_string(whole_models.export(make(), shape, 17)))
    m.set_optimizer(opt.SGD(lr=0.1, momentum=0.9))
    m.train()
    x = tensor.from_numpy(whole_models.batch(shape, 8, seed=3))
    y = tensor.from_numpy(np.arange(8) % 10)
    losses = []
    for _ in range(8):
        (out,) = m.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        m.optimizer(loss)
        losses.append(float(loss.to_numpy().reshape(-1)[0]))
    assert losses[-1] < losses[0] - 0.15 and losses[-1] == min(losses), losses


@pytest.mark.slow
@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("name", [*whole_models.TORCHVISION, *whole_models.TORCHVISION_DENSE])
def test_torchvision_models_match_onnxruntime(name, opset):
    try:
        module, shape = whole_models.torchvision_model(name)
    except Exception as e:  # torchvision missing or not importable here
        pytest.skip(f"torchvision is not usable: {e}")
    try:
        model_bytes = whole_models.export(module, shape, opset, batch=1)
    except torch.onnx.errors.UnsupportedOperatorError as e:  # ViT's attention before opset 14
        pytest.skip(f"torch does not export this model at opset {opset}: {str(e).splitlines()[0]}")
    _compare(model_bytes, whole_models.batch(shape, 1))
