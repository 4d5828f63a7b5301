"""N-D / dilated pooling (MaxPool's Indices output included) and 3-D transposed
convolution: export checked by onnxruntime at two batch sizes; import against ONNX's
reference evaluator and onnxruntime, export -> prepare round trips, and a fine-tuning
step through the imported operators."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from sonnx_helpers import check_export, op_types, rand, reference, session

from singa import autograd, sonnx, tensor
from singa.sonnx.export import ExportError
from singa.tensor import Tensor


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


def one_node(node, in_type, shape, out_types, opset=22):
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", in_type, shape)],
        [helper.make_tensor_value_info(n, t, None) for n, t in zip(node.output, out_types)],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize("dtype, onnx_type", [(np.int8, TensorProto.INT8), (np.float32, TensorProto.FLOAT)])
def test_max_pool_indices_match_the_reference_evaluator(order, dtype, onnx_type):
    node = helper.make_node(
        "MaxPool",
        ["x"],
        ["y", "i"],
        kernel_shape=[2, 2, 2],
        strides=[1, 2, 1],
        pads=[1, 0, 0, 0, 1, 1],
        dilations=[2, 1, 1],
        storage_order=order,
    )
    m = one_node(node, onnx_type, [2, 2, 4, 5, 3], [onnx_type, TensorProto.INT64])
    rng = np.random.default_rng(order)
    x = rng.permutation(240).reshape(2, 2, 4, 5, 3).astype(dtype) - 120
    y, i = sonnx.prepare(m).run([x])
    want_y, want_i = ReferenceEvaluator(m).run(None, {"x": x})
    assert y.dtype == dtype and i.dtype == np.int64
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_array_equal(i, want_i)


@pytest.mark.parametrize("cip", [0, 1])
def test_dilated_ceil_mode_avg_pool_matches_onnxruntime(cip):
    node = helper.make_node(
        "AveragePool",
        ["x"],
        ["y"],
        kernel_shape=[3, 2],
        strides=[2, 1],
        dilations=[1, 2],
        pads=[1, 0, 1, 1],
        ceil_mode=1,
        count_include_pad=cip,
    )
    m = one_node(node, TensorProto.FLOAT, [1, 3, 7, 6], [TensorProto.FLOAT], opset=19)
    x = rand((1, 3, 7, 6))
    (y,) = sonnx.prepare(m).run([x])
    (want,) = session(m).run(None, {"x": x})
    assert y.shape == want.shape == (1, 3, 4, 5)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_roundtrip_nd_pooling_and_conv_transpose_3d():
    w = Tensor(data=rand((2, 3, 2, 2, 3), seed=1), requires_grad=True, stores_grad=True, name="up.W")

    def f(x):
        y, idx = autograd.max_pool_nd(x, 2, 1, 1, (1, 2, 1), True, return_indices=True, storage_order=1)
        z = autograd.avg_pool_nd(autograd.relu(y), 2, 1, (0, 1, 0, 1, 0, 1), 2, False, False)
        return autograd.conv_transpose3d(z, w, None, 2, 1, 1), idx

    make = lambda b: [rand((b, 2, 5, 6, 5))]  # noqa: E731
    m = sonnx.to_onnx([tensor.from_numpy(a) for a in make(3)], f, opset=19)
    rep = sonnx.prepare(m)
    for b in (3, 4):
        arrays = make(b)
        want = reference(f, arrays)
        got = rep.run(arrays)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(got[1], want[1])


def test_fine_tuning_through_imported_3d_operators():
    """The imported ConvTranspose (3-D) and dilated pooling are differentiable: the
    gradient of the transposed filters equals the one of the same graph built directly."""
    w0 = rand((2, 2, 2, 2, 2), seed=3)
    w = Tensor(data=w0.copy(), requires_grad=True, stores_grad=True, name="up.W")

    def f(x):
        return autograd.conv_transpose3d(autograd.max_pool_nd(x, 2, 1, 0, 2), w, None, 2)

    x = rand((2, 2, 5, 5, 5))
    m = sonnx.to_onnx([tensor.from_numpy(x)], f)
    sm = sonnx.SONNXModel(m)
    (pname,) = [n for n in sm.get_params() if n.endswith("up.W")]
    param = sm.get_params()[pname]

    def grad_of(fn, p):
        out = fn(tensor.from_numpy(x))
        loss = autograd.reduce_sum(autograd.mul(out, out), None, 0)
        return {id(t): g.to_numpy() for t, g in autograd.backward(loss)}[id(p)]

    prev = autograd.training
    autograd.training = True
    try:
        got, want = grad_of(lambda t: sm.forward(t)[0], param), grad_of(f, w)  # forward: a list
    finally:
        autograd.training = prev
    assert np.abs(want).max() > 0
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
