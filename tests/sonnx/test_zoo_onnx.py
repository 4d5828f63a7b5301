"""Every model of the zoo at a small size: export, full check, onnxruntime at two batch
sizes against our eval output, and the round trip through prepare()."""

from __future__ import annotations

import numpy as np
import pytest
from sonnx_helpers import check_export, rand, reference

from singa import device, sonnx, tensor

zoo = pytest.importorskip("singa.zoo")

MODELS = [
    ("mlp", 1, 28),
    ("cnn", 1, 28),
    ("alexnet", 3, 32),
    ("resnet8", 3, 32),
    pytest.param("xceptionnet", 3, 32, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("name,channels,size", MODELS)
def test_zoo_model_exports_and_round_trips(name, channels, size):
    device.get_default_device().set_rand_seed(0)
    m = zoo.create(name, num_classes=10, num_channels=channels, image_size=size)

    def make(b):
        return [rand((b, channels, size, size))]

    onnx_model = check_export(m, make, batches=(1, 3))  # traced at batch 1, as the CLI does
    names = {i.name for i in onnx_model.graph.initializer}
    assert names == set(m.get_states())
    rep = sonnx.prepare(onnx_model)
    x = make(4)
    np.testing.assert_allclose(rep.run(x)[0], reference(m, x)[0], rtol=1e-5, atol=1e-5)


def test_exported_file_via_export_model(tmp_path):
    import onnx

    m = zoo.create("cnn", num_classes=10, num_channels=1, image_size=28)
    x = tensor.from_numpy(rand((2, 1, 28, 28)))
    m.compile([x], is_train=True)
    path = tmp_path / "cnn.onnx"
    proto = sonnx.export_model(m, str(path), [x])
    assert m.training  # export traced in eval mode and restored the mode
    loaded = onnx.load(str(path))
    assert loaded.graph == proto.graph
    onnx.checker.check_model(str(path), full_check=True)
    (y,) = sonnx.prepare(str(path)).run([rand((5, 1, 28, 28))])
    assert y.shape == (5, 10)
    sonnx.save(proto, tmp_path / "again.onnx")
    assert onnx.load(str(tmp_path / "again.onnx")).graph == proto.graph
