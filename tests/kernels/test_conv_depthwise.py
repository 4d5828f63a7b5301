"""Depthwise conv2d (groups == C == O): the kernels of singa.kernels.conv_depthwise
against the general grouped path and a direct-loop reference, float64 gradients,
thread-count independence and graph replay equal to eager."""

import sys
from pathlib import Path

import numpy as np
import pytest

import singa.kernels.conv_depthwise as depthwise
from singa import autograd, layer, model, opt
from singa.autograd.conv import Conv2d
from singa.autograd.gradcheck import gradcheck
from singa.kernels import conv_forward, workers
from singa.tensor import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "model"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "autograd"))
from model_helpers import assert_same, batches, run  # noqa: E402
from test_conv import nhwc, pads_of, ref_conv2d  # noqa: E402

# (x shape, kernel, bias, stride, padding, dilation)
CONFIGS = [
    ((2, 3, 7, 6), (3, 3), True, 1, 1, 1),  # "same" 3x3
    ((3, 5, 9, 8), (3, 3), False, 2, (1, 0, 2, 1), 1),  # stride 2, asymmetric padding
    ((1, 4, 11, 11), (5, 5), True, 1, 2, 2),  # dilation 2
    ((2, 6, 5, 5), (2, 2), False, (3, 1), 0, 1),  # stride 3 x 1, no padding
    ((2, 2, 6, 7), (3, 1), True, (1, 2), (0, 1), (2, 1)),  # non-square kernel, mixed stride
]


@pytest.fixture(params=["compiled", "passes"])
def path(request, monkeypatch):
    """Both kernels: numba's (numpy float32/64) and the elementwise passes (cupy, float16)."""
    if request.param == "passes":
        monkeypatch.setattr(depthwise, "_compiled", lambda xp, dtype: False)
    return request.param


def T(a, grad=True):
    return Tensor(data=a, dtype=a.dtype, requires_grad=grad, stores_grad=grad)


def make(cfg, rng, dtype=np.float64):
    xs, (kh, kw), bias, *_ = cfg
    c = xs[1]
    x = rng.standard_normal(xs).astype(dtype)
    w = rng.standard_normal((c, 1, kh, kw)).astype(dtype)
    b = rng.standard_normal(c).astype(dtype) if bias else None
    return x, w, b


def conv(x, w, b, cfg):
    return autograd.conv2d(x, w, b, cfg[3], cfg[4], cfg[5], groups=x.shape[1])


def forward_and_grads(cfg, x, w, b, dy):
    tx, tw = T(x), T(w)
    tb = None if b is None else T(b)
    y = conv(tx, tw, tb, cfg)
    g = autograd.gradients(y, dy)
    out = [y.to_numpy(), g[tx].to_numpy(), g[tw].to_numpy()]
    return out + ([] if tb is None else [g[tb].to_numpy()])


def test_applies_only_to_one_filter_per_channel():
    assert depthwise.applies(4, (2, 4, 5, 5), (4, 1, 3, 3))
    assert not depthwise.applies(4, (2, 4, 5, 5), (8, 1, 3, 3))  # channel multiplier 2
    assert not depthwise.applies(2, (2, 4, 5, 5), (4, 2, 3, 3))
    assert not depthwise.applies(1, (2, 1, 5, 5), (1, 1, 3, 3))  # one channel, ungrouped


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_forward_matches_direct_loops(cfg, layout, path):
    x, w, b = make(cfg, np.random.default_rng(1))
    xin = nhwc(x) if layout == "nhwc" else x
    y = conv(T(xin, False), T(w), None if b is None else T(b), cfg)
    assert isinstance(y.creator, Conv2d) and depthwise.is_cached(y.creator)
    expect = ref_conv2d(x, w, b, cfg[3], pads_of(cfg[4]), cfg[5], groups=x.shape[1])
    np.testing.assert_allclose(y.to_numpy(), expect, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cfg", CONFIGS)
def test_gradcheck(cfg, path):
    x, w, b = make(cfg, np.random.default_rng(2))
    if b is None:
        gradcheck(lambda x_, w_: conv(x_, w_, None, cfg), [x, w])
    else:
        gradcheck(lambda x_, w_, b_: conv(x_, w_, b_, cfg), [x, w, b])


def test_gradcheck_nhwc_input_and_dy(path):
    cfg = CONFIGS[0]
    x, w, b = make(cfg, np.random.default_rng(3))
    gradcheck(lambda x_, w_, b_: autograd.relu(conv(x_, w_, b_, cfg)), [nhwc(x), w, b])


@pytest.mark.parametrize("cfg", CONFIGS)
def test_matches_the_grouped_path(cfg, path, monkeypatch):
    rng = np.random.default_rng(4)
    x, w, b = make(cfg, rng, np.float32)
    y_ref = ref_conv2d(x, w, b, cfg[3], pads_of(cfg[4]), cfg[5], groups=x.shape[1])
    dy = rng.standard_normal(y_ref.shape).astype(np.float32)
    fast = forward_and_grads(cfg, x, w, b, dy)
    monkeypatch.setattr(depthwise, "applies", lambda *a: False)
    grouped = forward_and_grads(cfg, x, w, b, dy)
    for a, c in zip(fast, grouped):
        assert a.dtype == c.dtype == np.float32 and a.shape == c.shape
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-5)


def test_frozen_parts_get_no_gradient_and_nothing_is_kept():
    cfg = CONFIGS[0]
    x, w, b = make(cfg, np.random.default_rng(5))
    tx, tw, tb = T(x, False), T(w), T(b)
    y = conv(tx, tw, tb, cfg)
    _, _, xh, wk = y.creator.cache
    assert wk is None and xh is not None  # no dx wanted: the weights are not kept
    g = autograd.gradients(y, np.ones(y.shape))
    assert tx not in g and g[tw].shape == w.shape and g[tb].shape == b.shape
    with autograd.no_grad():
        assert conv(T(x), T(w), None, cfg).creator is None


@pytest.mark.parametrize("size", [6, 40])
def test_results_do_not_depend_on_the_worker_count(size, path, monkeypatch):
    # size 40: one sample's output is larger than a piece, so pieces split rows too
    monkeypatch.setattr(depthwise, "_PIECE_BYTES", 4096)
    cfg = ((5, 8, size, size), (3, 3), True, 1, 1, 1)
    rng = np.random.default_rng(6)
    x, w, b = make(cfg, rng, np.float32)
    dy = rng.standard_normal((5, 8, size, size)).astype(np.float32)
    out = []
    for n in (1, 2, 3):
        monkeypatch.setattr(workers, "_count", [n])
        out.append(forward_and_grads(cfg, x, w, b, dy))
    for other in out[1:]:
        for a, c in zip(out[0], other):
            np.testing.assert_array_equal(a, c)


def test_float16_is_computed_in_float32(path):
    cfg = CONFIGS[1]
    x, w, b = make(cfg, np.random.default_rng(7))
    x16, w16 = x.astype(np.float16), w.astype(np.float16)
    tx, tw = T(x16), T(w16)
    y16 = conv(tx, tw, None, cfg)
    assert y16.dtype == np.float16
    expect = ref_conv2d(
        x16.astype(np.float64), w16.astype(np.float64), None, *cfg[3:4], pads_of(cfg[4]), cfg[5], 5
    )
    np.testing.assert_allclose(y16.to_numpy(), expect.astype(np.float16), rtol=1e-3, atol=1e-3)
    g = autograd.gradients(y16, np.ones(y16.shape, np.float16))
    assert g[tx].dtype == g[tw].dtype == np.float16
    dw = forward_and_grads(
        cfg, x16.astype(np.float32), w16.astype(np.float32), None, np.ones(y16.shape, np.float32)
    )[2]
    np.testing.assert_array_equal(g[tw].to_numpy(), dw.astype(np.float16))


def test_pieces_cover_the_output_in_order(monkeypatch):
    monkeypatch.setattr(depthwise, "_PIECE_BYTES", 100)
    assert depthwise._pieces(2, 5, 40) == [
        (0, 1, 0, 2),
        (0, 1, 2, 4),
        (0, 1, 4, 5),
        (1, 2, 0, 2),
        (1, 2, 2, 4),
        (1, 2, 4, 5),
    ]
    assert depthwise._pieces(5, 1, 40) == [(0, 2, 0, 1), (2, 4, 0, 1), (4, 5, 0, 1)]


class SeparableNet(model.Model):
    """Depthwise-separable blocks (SINGA's Xception building block) and a classifier."""

    def __init__(self):
        super().__init__()
        self.conv = layer.Conv2d(6, 3, padding=1)
        self.sep1 = layer.SeparableConv2d(8, 3, padding=1)
        self.bn = layer.BatchNorm2d()
        self.relu = layer.ReLU()
        self.sep2 = layer.SeparableConv2d(8, 3, stride=2, padding=1)
        self.flatten = layer.Flatten()
        self.fc = layer.Linear(3)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        y = self.relu(self.bn(self.sep1(self.relu(self.conv(x)))))
        return self.fc(self.flatten(self.sep2(y)))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


@pytest.mark.parametrize("sequential", [True, False])
def test_separable_model_graph_is_bitwise_eager(sequential):
    data = batches(4, (4, 3, 9, 9), 3, sizes=[4, 4, 4, 3])
    make = lambda: opt.SGD(lr=0.05, momentum=0.9)  # noqa: E731
    eager = run(SeparableNet, make, data, use_graph=False)
    graph = run(SeparableNet, make, data, use_graph=True, sequential=sequential)
    assert_same(eager, graph)
    assert any("sep1" in k for k in graph[2])


def test_fused_relu_forward(path):
    cfg = CONFIGS[0]
    x, w, b = make(cfg, np.random.default_rng(8))
    op = Conv2d((3, 3), (1, 1), (1, 1, 1, 1), groups=3, bias=True)
    y = conv_forward.forward(x, w, b, **op.geometry(), relu=True)
    expect = ref_conv2d(x, w, b, 1, (1, 1, 1, 1), 1, groups=3)
    np.testing.assert_allclose(y, np.maximum(expect, 0), rtol=1e-12, atol=1e-12)
