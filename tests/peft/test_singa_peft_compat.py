"""Apache SINGA's own ``singa_peft`` package (examples/singa_peft/src in SINGA's
repository, put on the path beside ours) runs on this singa unchanged, and gives the
same numbers as ``singa.peft``. Skipped when ``singa_peft`` is not importable."""

import numpy as np
import pytest
from peft_helpers import MLP, t32

import singa.peft
from singa import device, opt, tensor


def _singa_peft():
    try:
        import singa_peft
    except Exception as e:  # not installed (it is not on PyPI), or broken
        pytest.skip(f"SINGA's singa_peft is not importable: {e}")
    return singa_peft


def _train(peft_module, steps=4):
    device.get_default_device().set_rand_seed(0)
    m = MLP()
    sgd = opt.SGD(0.5, 0.9, 1e-5)
    tx = t32(np.zeros((16, 6)))
    ty = tensor.Tensor((16,), dtype=tensor.int32)
    m.set_optimizer(sgd)
    m.compile([tx], is_train=True, use_graph=False, sequential=True)
    config = peft_module.LinearLoraConfig(4, 1, 0.2, ["linear1", "linear2"])
    pm = peft_module.get_peft_model(m, config)
    pm.set_optimizer(sgd)
    pm.compile([tx], is_train=True, use_graph=False, sequential=True)
    pm.train()
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(steps):
        x = rng.standard_normal((16, 6)).astype(np.float32)
        tx.copy_from_numpy(x)
        ty.copy_from_numpy((x[:, 0] > 0).astype(np.int32))
        _, loss = pm(tx, ty, "plain", None)
        losses.append(float(tensor.to_numpy(loss)[0]))
    params = {n: t.to_numpy().copy() for n, t in pm.get_params().items()}
    pm.merge_weights(mode=True)
    merged = m.linear1.base_layer.W.to_numpy().copy()
    return losses, params, merged


def test_singa_peft_runs_on_this_singa_and_matches_singa_dot_peft():
    sp = _singa_peft()
    theirs = _train(sp)
    ours = _train(singa.peft)
    np.testing.assert_allclose(theirs[0], ours[0], rtol=1e-6)
    assert theirs[1].keys() == ours[1].keys()
    for k in ours[1]:
        np.testing.assert_allclose(theirs[1][k], ours[1][k], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(theirs[2], ours[2], rtol=1e-5, atol=1e-7)
