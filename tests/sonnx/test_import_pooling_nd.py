"""Import of N-D / dilated pooling (MaxPool's Indices output included) and 3-D
ConvTranspose: against ONNX's reference evaluator, export -> prepare round trips, and
a fine-tuning step through the imported operators."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from sonnx_helpers import rand, reference, session

from singa import autograd, sonnx, tensor
from singa.tensor import Tensor


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
