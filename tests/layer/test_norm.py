"""BatchNorm2d, LayerNorm and Dropout: states, momentum convention, train/eval, gradients."""

import numpy as np
import pytest
from layer_helpers import param_gradcheck, t64

from singa import autograd, device, layer


def test_batchnorm_lazy_states_and_names():
    bn = layer.BatchNorm2d()
    assert bn.get_states() == {}
    x = np.random.default_rng(0).standard_normal((4, 3, 2, 2))
    bn(t64(x))
    states = bn.get_states()
    assert list(states) == ["scale", "bias", "running_mean", "running_var"]
    assert list(bn.get_params()) == ["scale", "bias"]
    assert not states["running_mean"].requires_grad and not states["running_var"].requires_grad
    assert all(t.dtype == np.float64 and t.shape == (3,) for t in states.values())
    np.testing.assert_array_equal(states["scale"].to_numpy(), 1)
    np.testing.assert_array_equal(states["bias"].to_numpy(), 0)


def test_batchnorm_eager_form_and_channel_check():
    bn = layer.BatchNorm2d(3, 0.8)
    assert bn.momentum == 0.8 and bn.running_var.shape == (3,) and bn.num_features == 3
    np.testing.assert_array_equal(bn.running_var.to_numpy(), 1)
    with pytest.raises(ValueError, match="expected 3 channels"):
        bn(t64(np.ones((2, 4, 2, 2))))
    with pytest.raises(ValueError, match="momentum"):
        layer.BatchNorm2d(3, momentum=1.5)


def test_batchnorm_momentum_convention_and_modes():
    bn = layer.BatchNorm2d(momentum=0.9)
    x = np.random.default_rng(1).standard_normal((5, 2, 3, 3)) * 2 + 1
    y = bn(t64(x)).to_numpy()
    mean = x.mean(axis=(0, 2, 3))
    var = x.var(axis=(0, 2, 3))
    n = x.size // 2
    np.testing.assert_allclose(bn.running_mean.to_numpy(), 0.9 * 0 + 0.1 * mean, rtol=1e-12)
    np.testing.assert_allclose(bn.running_var.to_numpy(), 0.9 * 1 + 0.1 * var * n / (n - 1), rtol=1e-12)
    ref = (x - mean.reshape(1, -1, 1, 1)) / np.sqrt(var.reshape(1, -1, 1, 1) + 1e-5)
    np.testing.assert_allclose(y, ref, rtol=1e-10, atol=1e-12)
    # evaluation mode uses (and does not touch) the running statistics
    rm, rv = bn.running_mean.to_numpy(), bn.running_var.to_numpy()
    bn.eval()
    ye = bn(t64(x)).to_numpy()
    np.testing.assert_array_equal(bn.running_mean.to_numpy(), rm)
    ref_e = (x - rm.reshape(1, -1, 1, 1)) / np.sqrt(rv.reshape(1, -1, 1, 1) + 1e-5)
    np.testing.assert_allclose(ye, ref_e, rtol=1e-10)
    # the layer's mode, not graph recording, decides
    bn.train()
    autograd.training = False
    bn(t64(x))
    assert not np.allclose(bn.running_mean.to_numpy(), rm)


def test_batchnorm_running_stats_updated_in_place():
    bn = layer.BatchNorm2d(2)
    x = t64(np.random.default_rng(2).standard_normal((3, 2, 2, 2)))
    bn(x)  # the first call adopts the input's dtype
    arr, before = bn.running_mean.data, bn.running_mean.to_numpy()
    bn(x)
    assert bn.running_mean.data is arr and not np.array_equal(arr, before)


@pytest.mark.parametrize("shape", [(4, 2, 3, 3), (5, 3)])
def test_batchnorm_gradcheck(shape):
    x = np.random.default_rng(3).standard_normal(shape)
    bn = layer.BatchNorm2d()
    assert param_gradcheck(bn, [x]) == ["scale", "bias"]
    bn.eval()
    param_gradcheck(bn, [x])


def test_layernorm_forms_and_forward():
    ln = layer.LayerNorm()
    x = np.random.default_rng(4).standard_normal((2, 3, 5))
    y = ln(t64(x))
    assert ln.scale.shape == (5,) and ln.bias.shape == (5,) and ln.scale.dtype == np.float64
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y.to_numpy(), ref, rtol=1e-10, atol=1e-12)
    ln2 = layer.LayerNorm((3, 5))
    assert ln2.scale.shape == (3, 5) and ln2.axis == -2
    m = x.mean(axis=(1, 2), keepdims=True)
    v = x.var(axis=(1, 2), keepdims=True)
    np.testing.assert_allclose(ln2(t64(x)).to_numpy(), (x - m) / np.sqrt(v + 1e-5), rtol=1e-10, atol=1e-12)
    assert layer.LayerNorm(axis=1)(t64(x)).shape == x.shape
    with pytest.raises(ValueError, match="trailing dims"):
        ln(t64(np.ones((2, 4))))


def test_layernorm_gradcheck():
    x = np.random.default_rng(5).standard_normal((3, 4))
    ln = layer.LayerNorm()
    ln(t64(x))
    ln.scale.gaussian(1.0, 0.3)
    ln.bias.gaussian(0.0, 0.3)
    assert param_gradcheck(ln, [x]) == ["scale", "bias"]


def test_dropout_honours_ratio_and_mode():
    device.get_default_device().set_rand_seed(0)
    x = np.ones((200, 100))
    d = layer.Dropout(0.3)
    y = d(t64(x)).to_numpy()
    kept = y != 0
    assert abs(kept.mean() - 0.7) < 0.01
    np.testing.assert_allclose(y[kept], 1 / 0.7)
    d.eval()
    np.testing.assert_array_equal(d(t64(x)).to_numpy(), x)
    # the layer's mode decides even while the graph is not recorded
    d.train()
    autograd.training = False
    assert (d(t64(x)).to_numpy() == 0).any()
    with pytest.raises(ValueError, match="ratio"):
        layer.Dropout(1.0)


def test_train_eval_reach_nested_dropout_and_batchnorm():
    class Net(layer.Layer):
        def __init__(self):
            super().__init__()
            self.blocks = [layer.BatchNorm2d(), {"drop": layer.Dropout(0.5)}]

        def forward(self, x):
            return self.blocks[1]["drop"](self.blocks[0](x))

    net = Net()
    x = t64(np.random.default_rng(6).standard_normal((4, 2, 3, 3)))
    net(x)
    net.eval()
    assert not net.blocks[0].training and not net.blocks[1]["drop"].training
    rm = net.blocks[0].running_mean.to_numpy()
    y1, y2 = net(x).to_numpy(), net(x).to_numpy()
    np.testing.assert_array_equal(y1, y2)  # deterministic in eval
    np.testing.assert_array_equal(net.blocks[0].running_mean.to_numpy(), rm)


def test_rmsnorm_layer_against_numpy_and_torch():
    from singa.layer import RMSNorm
    from singa.tensor import from_numpy as layer_t

    rs = np.random.default_rng(3)
    x = rs.standard_normal((2, 3, 4)).astype(np.float32)
    m = RMSNorm(4)
    m.weight.copy_from(np.linspace(0.5, 2, 4).astype(np.float32))
    y = m(layer_t(x)).to_numpy()
    want = x / np.sqrt((x * x).mean(-1, keepdims=True) + np.finfo(np.float32).eps) * np.linspace(0.5, 2, 4)
    np.testing.assert_allclose(y, want, rtol=1e-5)
    assert list(m.get_params()) == ["weight"] and RMSNorm((3, 4), elementwise_affine=False).get_params() == {}
    with pytest.raises(ValueError, match="trailing dims"):
        m(layer_t(np.zeros((2, 5), np.float32)))
    try:
        import torch
    except Exception:
        return
    t = torch.nn.RMSNorm(4)
    with torch.no_grad():
        t.weight.copy_(torch.linspace(0.5, 2, 4))
    np.testing.assert_allclose(y, t(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
