"""Training-graph fusion (singa.model.training_fusion): a BatchNorm whose only user is
a ReLU runs both in one pass each way, with the bits of the two operators in turn."""

import numpy as np
import pytest
from model_helpers import LayerCNN, assert_same, batches, run

from singa import opt
from singa.autograd.activation import ReLU
from singa.autograd.normalization import BatchNorm2d
from singa.model.training_fusion import BATCHNORM_ADD_RELU, BATCHNORM_RELU


def _sgd():
    return opt.SGD(0.1, momentum=0.9, weight_decay=1e-4)


def _graph(m):
    (graph, _), *_ = m._graphs.values()
    return graph


def test_a_resnet_graph_fuses_each_batchnorm_followed_by_relu_alone_and_stays_bitwise_eager():
    data = batches(4, (6, 3, 8, 8), 3)
    eager = run(LayerCNN, _sgd, data, use_graph=False)
    graph = run(LayerCNN, _sgd, data, use_graph=True)
    assert_same(eager, graph)
    # the stem's BatchNorm and each block's first; each block's end (its second BatchNorm,
    # the residual sum, ReLU: the first block's residual, from a max-pool, is laid out
    # otherwise and takes the three operators in turn on each call, bitwise all the same)
    fusions = _graph(graph[3]).fusions
    assert fusions[BATCHNORM_RELU] == 3 and fusions[BATCHNORM_ADD_RELU] == 2


def test_sequential_graphs_are_not_rewritten():
    graph = run(LayerCNN, _sgd, batches(2, (6, 3, 8, 8), 3), use_graph=True, sequential=True)
    assert _graph(graph[3]).fusions[BATCHNORM_RELU] == 0


def _edge_values(shape, dtype, seed):
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    flat[:5] = [np.nan, np.inf, -np.inf, 0.0, -0.0]
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("channels_last", [False, True])
def test_forward_relu_and_backward_gated_give_the_bits_of_batchnorm_then_relu(dtype, channels_last):
    shape = (6, 5, 7, 9)
    x = _edge_values(shape, dtype, 0)
    x[:, :, 0, 0] = 0.25  # a value a channel's normalisation can send to exactly 0
    if channels_last:
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    x[1:] = np.nan_to_num(x[1:])  # keep most statistics finite
    dy = _edge_values(shape, dtype, 1)
    params = [np.random.default_rng(2).standard_normal(5).astype(dtype) for _ in range(2)]

    def ops():
        bn, relu = BatchNorm2d(0.9, 1e-5, True), ReLU()
        for op in (bn, relu):
            op.requires_grad = True
        bn.needs_grad, relu.needs_grad = (True, True, True, False, False), (True,)
        return bn, relu

    bn, relu = ops()
    stats = [np.zeros(5, dtype), np.ones(5, dtype)]
    y = relu.forward(bn.forward(x, *params, *stats))
    want = bn.backward(relu.backward(dy.copy()))
    fused_bn, _ = ops()
    fused_stats = [np.zeros(5, dtype), np.ones(5, dtype)]
    fy = fused_bn.forward_relu(x, *params, *fused_stats)
    got = fused_bn.backward_gated(dy.copy(), fy)
    _same_bits(fy, y)
    for a, b in zip(stats, fused_stats):
        np.testing.assert_array_equal(a, b)
    for w, g in zip(want, got):
        _same_bits(g, w)


def _same_bits(got, want):
    """Equal bit for bit, zeros' signs included; NaNs where NaNs are (a NaN's sign and
    payload follow the order of a product's operands, which the compiler may swap)."""
    got, want = np.asarray(got), np.asarray(want)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint8), want[~nan].view(np.uint8))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("first", [True, False])
def test_forward_add_relu_gives_the_bits_of_batchnorm_the_sum_and_relu(dtype, first):
    from singa.autograd.elementwise import Add

    shape = (6, 5, 7, 9)
    x = np.ascontiguousarray(_edge_values(shape, dtype, 3).transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    x[1:] = np.nan_to_num(x[1:])
    residual = np.empty_like(x)
    residual[...] = _edge_values(shape, dtype, 4)  # laid out as x is
    params = [np.random.default_rng(5).standard_normal(5).astype(dtype) for _ in range(2)]
    stats = [np.zeros(5, dtype), np.ones(5, dtype)]
    y = BatchNorm2d(0.9, 1e-5, True).forward(x, *params, *stats)
    want = ReLU().forward(Add().forward(*((y, residual) if first else (residual, y))))
    fused_stats = [np.zeros(5, dtype), np.ones(5, dtype)]
    got = BatchNorm2d(0.9, 1e-5, True).forward_add_relu(x, *params, *fused_stats, residual)
    _same_bits(got, want)
    assert got.strides == want.strides  # the layout the next kernels see
    for a, b in zip(stats, fused_stats):
        np.testing.assert_array_equal(a, b)
