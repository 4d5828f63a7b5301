"""Conv2d, SeparableConv2d and pooling layers: signatures, shapes, padding modes, gradients."""

import math

import numpy as np
import pytest
from layer_helpers import param_gradcheck, t64

from singa import autograd, device, layer


def conv_ref(x, w, b, stride, pads, groups=1):
    """Direct NCHW cross-correlation; pads = (top, left, bottom, right)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (xp.shape[2] - kh) // stride[0] + 1
    ow = (xp.shape[3] - kw) // stride[1] + 1
    y = np.zeros((n, o, oh, ow))
    og = o // groups
    for g in range(groups):
        xs = xp[:, g * cg : (g + 1) * cg]
        for i in range(oh):
            for j in range(ow):
                patch = xs[:, :, i * stride[0] : i * stride[0] + kh, j * stride[1] : j * stride[1] + kw]
                wg = w[g * og : (g + 1) * og]
                y[:, g * og : (g + 1) * og, i, j] = np.einsum("nchw,ochw->no", patch, wg)
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    return y


def test_conv2d_lazy_creation_and_forward():
    conv = layer.Conv2d(4, 3, stride=2, padding=1)
    assert conv.W is None and conv.get_params() == {}
    x = np.random.default_rng(0).standard_normal((2, 3, 7, 6))
    y = conv(t64(x))
    assert conv.W.shape == (4, 3, 3, 3) and conv.b.shape == (4,) and conv.W.dtype == np.float64
    assert conv.in_channels == 3 and conv.out_channels == 4
    ref = conv_ref(x, conv.W.to_numpy(), conv.b.to_numpy(), (2, 2), (1, 1, 1, 1))
    assert y.shape == ref.shape == (2, 4, 4, 3)
    np.testing.assert_allclose(y.to_numpy(), ref, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="Conv2d: expected input"):
        conv(t64(np.ones((2, 5, 7, 6))))


def test_conv2d_legacy_positional_form_is_eager():
    conv = layer.Conv2d(3, 32, 3, 2, 0, bias=False)  # SINGA: (in, out, k, stride, padding)
    assert conv.W.shape == (32, 3, 3, 3) and conv.b is None and conv.stride == (2, 2)
    assert list(conv.get_params()) == ["W"]
    y = conv(t64(np.ones((1, 3, 9, 9))))
    assert y.shape == (1, 32, 4, 4)


def test_conv2d_default_init_bound():
    device.get_default_device().set_rand_seed(1)
    conv = layer.Conv2d(8, 64, 3)
    fan_in = 8 * 9
    w = conv.W.to_numpy()
    assert np.abs(w).max() <= 1 / math.sqrt(fan_in) and np.abs(w).max() > 0.95 / math.sqrt(fan_in)
    assert np.abs(conv.b.to_numpy()).max() <= 1 / math.sqrt(fan_in)


@pytest.mark.parametrize(
    "mode,h,k,s,expect_pads",
    [
        ("SAME_UPPER", 6, 3, 2, (0, 0, 1, 1)),  # total 1: the odd pixel at the end
        ("SAME_LOWER", 6, 3, 2, (1, 1, 0, 0)),
        ("SAME_UPPER", 5, 3, 1, (1, 1, 1, 1)),
        ("VALID", 6, 3, 2, (0, 0, 0, 0)),
    ],
)
def test_conv2d_pad_modes(mode, h, k, s, expect_pads):
    conv = layer.Conv2d(2, k, stride=s, pad_mode=mode)
    x = np.random.default_rng(2).standard_normal((1, 2, h, h))
    y = conv(t64(x))
    ref = conv_ref(x, conv.W.to_numpy(), conv.b.to_numpy(), (s, s), expect_pads)
    np.testing.assert_allclose(y.to_numpy(), ref, rtol=1e-10, atol=1e-12)
    if mode != "VALID":
        assert y.shape[2:] == (math.ceil(h / s),) * 2


def test_conv2d_singa_four_tuple_padding_is_top_bottom_left_right():
    conv = layer.Conv2d(1, 2, padding=(1, 0, 2, 0), bias=False)
    x = np.random.default_rng(3).standard_normal((1, 1, 4, 4))
    y = conv(t64(x))
    ref = conv_ref(x, conv.W.to_numpy(), None, (1, 1), (1, 2, 0, 0))  # top=1, left=2
    np.testing.assert_allclose(y.to_numpy(), ref, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="pad_mode"):
        layer.Conv2d(1, 2, pad_mode="SAME")


def test_conv2d_groups_and_validation():
    conv = layer.Conv2d(4, 3, padding=1, group=2)
    x = np.random.default_rng(4).standard_normal((2, 6, 5, 5))
    y = conv(t64(x))
    assert conv.W.shape == (4, 3, 3, 3)
    ref = conv_ref(x, conv.W.to_numpy(), conv.b.to_numpy(), (1, 1), (1, 1, 1, 1), groups=2)
    np.testing.assert_allclose(y.to_numpy(), ref, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="not divisible by group"):
        layer.Conv2d(3, 3, group=2)
    with pytest.raises(ValueError, match="in_channels 5 is not divisible"):
        layer.Conv2d(4, 3, group=2)(t64(np.ones((1, 5, 4, 4))))


def test_conv2d_relu_activation():
    conv = layer.Conv2d(3, 3, padding=1, activation="RELU")
    y = conv(t64(np.random.default_rng(5).standard_normal((1, 2, 4, 4)))).to_numpy()
    assert (y >= 0).all() and (y == 0).any()


@pytest.mark.parametrize(
    "kwargs,shape",
    [({"stride": 1, "padding": 1}, (2, 2, 4, 4)), ({"stride": 2, "pad_mode": "SAME_UPPER"}, (1, 3, 5, 4))],
)
def test_conv2d_gradcheck(kwargs, shape):
    x = np.random.default_rng(6).standard_normal(shape)
    assert param_gradcheck(layer.Conv2d(3, 3, **kwargs), [x]) == ["W", "b"]


def test_separable_conv2d_forms_and_names():
    sep = layer.SeparableConv2d(5, 3, padding=1)
    assert sep.get_params() == {}
    x = np.random.default_rng(7).standard_normal((2, 4, 6, 6))
    y = sep(t64(x))
    assert y.shape == (2, 5, 6, 6)
    assert list(sep.get_params()) == ["depthwise_conv.W", "point_conv.W"]  # bias=False (SINGA)
    assert sep.depthwise_conv.W.shape == (4, 1, 3, 3) and sep.point_conv.W.shape == (5, 4, 1, 1)
    dw = conv_ref(x, sep.depthwise_conv.W.to_numpy(), None, (1, 1), (1, 1, 1, 1), groups=4)
    ref = conv_ref(dw, sep.point_conv.W.to_numpy(), None, (1, 1), (0, 0, 0, 0))
    np.testing.assert_allclose(y.to_numpy(), ref, rtol=1e-10, atol=1e-12)
    legacy = layer.SeparableConv2d(4, 5, 3, 2, 1)  # (in, out, k, stride, padding)
    assert legacy.depthwise_conv.W.shape == (4, 1, 3, 3) and legacy(t64(x)).shape == (2, 5, 3, 3)
    param_gradcheck(layer.SeparableConv2d(3, 3, padding=1, bias=True), [x[:1, :, :4, :4]])


def pool_ref(x, k, s, pads, is_max):
    """Max pooling, or average pooling over the real cells only (padding excluded, the
    default, as SINGA's kernels)."""
    fill = -np.inf if is_max else 0.0
    widths = ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3]))
    xp = np.pad(x, widths, constant_values=fill)
    real = np.pad(np.ones(x.shape[2:]), widths[2:])
    oh = (xp.shape[2] - k[0]) // s[0] + 1
    ow = (xp.shape[3] - k[1]) // s[1] + 1
    y = np.zeros(x.shape[:2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            rows, cols = slice(i * s[0], i * s[0] + k[0]), slice(j * s[1], j * s[1] + k[1])
            win = xp[:, :, rows, cols]
            y[:, :, i, j] = win.max(axis=(2, 3)) if is_max else win.sum(axis=(2, 3)) / real[rows, cols].sum()
    return y


@pytest.mark.parametrize("cls,is_max", [(layer.MaxPool2d, True), (layer.AvgPool2d, False)])
def test_pooling_layers_match_reference(cls, is_max):
    x = np.random.default_rng(8).standard_normal((2, 3, 7, 7))
    y = cls(3, 2, 1)(t64(x))
    np.testing.assert_allclose(y.to_numpy(), pool_ref(x, (3, 3), (2, 2), (1, 1, 1, 1), is_max), rtol=1e-12)
    assert cls(2)(t64(x)).shape == (2, 3, 3, 3)  # stride defaults to the kernel
    same = cls(3, 2, pad_mode="SAME_UPPER")(t64(x))
    np.testing.assert_allclose(same.to_numpy(), pool_ref(x, (3, 3), (2, 2), (1, 1, 1, 1), is_max), rtol=1e-12)
    assert cls(2, ceil_mode=True)(t64(x)).shape == (2, 3, 4, 4)
    p = layer.Pooling2d(3, 1, is_max=is_max)
    assert p(t64(x)).shape == (2, 3, 5, 5) and p.get_params() == {}


def test_avg_pool_count_include_pad_flag():
    """Padding is excluded by default, as SINGA's oneDNN and cuDNN kernels do."""
    x = np.ones((1, 1, 3, 3))
    inc = layer.AvgPool2d(3, 1, 1, count_include_pad=True)(t64(x)).to_numpy()
    exc = layer.AvgPool2d(3, 1, 1)(t64(x)).to_numpy()
    assert inc[0, 0, 0, 0] == pytest.approx(4 / 9) and np.allclose(exc, 1.0)
    assert np.allclose(layer.AvgPool1d(3, 1, 1)(t64(np.ones((1, 1, 5)))).to_numpy(), 1.0)
    assert np.allclose(autograd.avg_pool_2d(t64(x), 3, 1, 1).to_numpy(), 1.0)
    assert np.allclose(autograd.avg_pool_nd(t64(np.ones((1, 1, 3, 3, 3))), 3, 1, 1).to_numpy(), 1.0)


@pytest.mark.parametrize("cls,is_max", [(layer.MaxPool1d, True), (layer.AvgPool1d, False)])
def test_pool1d_on_ncl_and_singa_nc1l_inputs(cls, is_max):
    x = np.random.default_rng(9).standard_normal((2, 3, 9))
    y = cls(3, 2, 1)(t64(x))
    ref = pool_ref(x[:, :, None, :], (1, 3), (1, 2), (0, 1, 0, 1), is_max)[:, :, 0, :]
    np.testing.assert_allclose(y.to_numpy(), ref, rtol=1e-12)
    y4 = cls(3)(t64(x[:, :, None, :]))
    assert y4.shape == (2, 3, 1, 3)
    with pytest.raises(ValueError, match="expected input"):
        cls(3)(t64(np.ones((2, 3, 2, 9))))


@pytest.mark.parametrize("cls,is_max", [(layer.MaxPool1d, True), (layer.AvgPool1d, False)])
@pytest.mark.parametrize(
    "mode,pads",  # L = 9, kernel 4, stride 2: output ceil(9 / 2) = 5 needs 3 pads for SAME
    [("SAME_UPPER", (1, 2)), ("same_lower", (2, 1)), ("VALID", (0, 0)), ("NOTSET", (1, 1))],
)
def test_pool1d_pad_mode(cls, is_max, mode, pads):
    x = np.random.default_rng(12).standard_normal((2, 3, 9))
    pool = cls(4, 2, 1, mode)  # SINGA's positional order: kernel, stride, padding, pad_mode
    assert pool.pad_mode == mode.upper()
    b, e = pads
    ref = pool_ref(x[:, :, None, :], (1, 4), (1, 2), (0, b, 0, e), is_max)[:, :, 0, :]
    np.testing.assert_allclose(pool(t64(x)).to_numpy(), ref, rtol=1e-12)
    y4 = cls(4, 2, pad_mode=mode)(t64(x[:, :, None, :]))
    np.testing.assert_allclose(y4.to_numpy()[:, :, 0, :], cls(4, 2, pad_mode=mode)(t64(x)).to_numpy())
    with pytest.raises(ValueError, match="pad_mode"):
        cls(4, pad_mode="SAME")


def test_global_avg_pool_layer():
    x = np.random.default_rng(10).standard_normal((2, 3, 4, 5))
    y = layer.GlobalAvgPool2d()(t64(x))
    np.testing.assert_allclose(y.to_numpy(), x.mean(axis=(2, 3), keepdims=True), rtol=1e-12)


def test_layers_accept_changing_batch_and_image_sizes():
    conv = layer.Conv2d(3, 3, stride=2, pad_mode="SAME_UPPER")
    pool = layer.MaxPool2d(3, 2, pad_mode="SAME_LOWER")
    rng = np.random.default_rng(11)
    for shape in [(2, 2, 6, 6), (3, 2, 7, 5), (1, 2, 4, 9)]:
        x = rng.standard_normal(shape)
        y = conv(t64(x))
        pads = (1, 1, 1, 1) if shape[2] % 2 else (0, 0, 1, 1)
        pads = (pads[0], 1 if shape[3] % 2 else 0, pads[2], 1)
        ref = conv_ref(x, conv.W.to_numpy(), conv.b.to_numpy(), (2, 2), pads)
        np.testing.assert_allclose(y.to_numpy(), ref, rtol=1e-10, atol=1e-12)
        assert pool(y).shape == shape[:1] + (3, -(-y.shape[2] // 2), -(-y.shape[3] // 2))
