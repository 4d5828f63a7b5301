"""Export of N-D / dilated pooling (with MaxPool's Indices output) and of 3-D
transposed convolution, checked by onnxruntime at two batch sizes."""

from __future__ import annotations

import pytest
from sonnx_helpers import check_export, op_types, rand

from singa import autograd, sonnx, tensor
from singa.sonnx.export import ExportError


def vol(c, d=5, h=6, w=7):
    return lambda b: [rand((b, c, d, h, w))]


@pytest.mark.parametrize("opset", [17, 22])
@pytest.mark.parametrize(
    "k, s, p, d, ceil",
    [
        (2, None, 0, 1, False),
        ((2, 3, 2), (1, 2, 2), (1, 0, 1, 0, 1, 1), 1, False),
        (2, 1, 0, 2, False),
        (3, 2, 1, (1, 2, 1), True),
    ],
)
def test_max_pool_3d(k, s, p, d, ceil, opset):
    m = check_export(lambda x: autograd.max_pool_nd(x, k, s, p, d, ceil), vol(2), tol=1e-6, opset=opset)
    assert op_types(m) == ["MaxPool"]


@pytest.mark.parametrize("opset", [19, 22])
@pytest.mark.parametrize(
    "k, s, p, d, ceil, cip",
    [
        (2, None, 0, 1, False, True),
        (3, 2, 1, 1, True, False),
        (2, 1, (1, 0, 0, 0, 1, 1), 2, False, True),
        (2, 2, 0, (2, 1, 2), True, False),
    ],
)
def test_avg_pool_3d_and_dilated(k, s, p, d, ceil, cip, opset):
    f = lambda x: autograd.avg_pool_nd(x, k, s, p, d, ceil, cip)  # noqa: E731
    check_export(f, vol(2), tol=1e-5, opset=opset)


def test_dilated_2d_and_1d_pooling():
    img = lambda b: [rand((b, 3, 7, 8))]  # noqa: E731
    check_export(lambda x: autograd.max_pool_nd(x, 2, 1, 1, 2, True), img, tol=1e-6)
    check_export(
        lambda x: autograd.avg_pool_nd(x, (2, 3), 2, 0, (2, 1), False, False), img, tol=1e-5, opset=19
    )
    seq = lambda b: [rand((b, 3, 11))]  # noqa: E731
    check_export(lambda x: autograd.max_pool_nd(x, 3, 2, (1, 0), 2), seq, tol=1e-6)


@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize("shape, k, s, p", [((9,), 3, 2, 1), ((5, 6), 2, 2, 0), ((4, 5, 6), 3, 2, 1)])
def test_max_pool_indices(shape, k, s, p, order):
    def f(x):
        return autograd.max_pool_nd(x, k, s, p, return_indices=True, storage_order=order)

    m = check_export(f, lambda b: [rand((b, 2) + shape)], tol=1e-6)
    assert [o.type.tensor_type.elem_type for o in m.graph.output][1] == 7  # int64


def test_dilated_avg_pool_before_opset_19_is_an_export_error():
    x = tensor.from_numpy(rand((2, 2, 6, 6)))
    with pytest.raises(ExportError, match=r"AvgPoolNd.*opset 19"):
        sonnx.to_onnx([x], lambda x: autograd.avg_pool_nd(x, 2, 1, 0, 2), opset=17)


@pytest.mark.parametrize(
    "ci, co, groups, stride, pads, outpad, dil, bias",
    [
        (2, 3, 1, 1, 0, 0, 1, False),
        (4, 6, 2, (2, 1, 2), (1, 0, 1, 0, 1, 1), (1, 0, 1), 1, True),
        (2, 2, 1, 2, 1, 0, (1, 2, 1), True),
        (2, 4, 2, 2, (0, 1, 0, 1, 0, 1), 1, 1, False),
    ],
)
def test_conv_transpose_3d(ci, co, groups, stride, pads, outpad, dil, bias):
    w = tensor.from_numpy(rand((ci, co // groups, 2, 3, 2), seed=1))
    b = tensor.from_numpy(rand((co,), seed=2)) if bias else None

    def f(x):
        return autograd.conv_transpose3d(x, w, b, stride, pads, outpad, dil, groups)

    m = check_export(f, vol(ci, 3, 4, 3))
    assert op_types(m).count("ConvTranspose") == 1
