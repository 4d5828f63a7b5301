"""A merged LoRA model exports to ONNX as the plain model: the same operators as the
model without adapters, and onnxruntime gives the unmerged model's outputs."""

import numpy as np
import pytest
from peft_helpers import ConvNet, t32

from singa import device, sonnx
from singa.peft import LinearLoraConfig, get_peft_model


def _run(model_proto, x):
    ort = pytest.importorskip("onnxruntime")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model_proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def _net():
    device.get_default_device().set_rand_seed(0)
    net = ConvNet()
    net.compile([t32(np.zeros((2, 3, 6, 6)))], is_train=False)
    return net


def test_merged_model_exports_as_the_plain_model(tmp_path):
    x = np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(np.float32)
    plain_ops = [n.op_type for n in sonnx.export_model(_net(), None, [t32(x)]).graph.node]
    pm = get_peft_model(
        _net(), LinearLoraConfig(r=2, lora_alpha=4, target_layers=["*conv*", "blocks.0", "fc"])
    )
    rng = np.random.default_rng(1)
    for t in pm.get_params().values():
        t.copy_from(rng.standard_normal(t.shape).astype(np.float32) * 0.3)
    pm.eval()
    want = pm(t32(x)).to_numpy()
    unmerged_ops = [n.op_type for n in sonnx.export_model(pm.base_model, None, [t32(x)]).graph.node]
    assert len(unmerged_ops) > len(plain_ops)  # the adapters are there before merging
    pm.merge_weights(True)
    proto = sonnx.export_model(pm.base_model, str(tmp_path / "m.onnx"), [t32(x)])
    assert [n.op_type for n in proto.graph.node] == plain_ops
    got = _run(proto, x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    plain = pm.merge_and_unload()
    proto2 = sonnx.export_model(plain, None, [t32(x)])
    assert [n.op_type for n in proto2.graph.node] == plain_ops
    np.testing.assert_allclose(_run(proto2, x), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
