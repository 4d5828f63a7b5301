"""Indexing: ONNX export checked by onnxruntime at two batch sizes (and, where
the test says so, imported back with ``sonnx.prepare`` and run against our output)."""

from __future__ import annotations

import numpy as np
import pytest
from sonnx_helpers import check_export, handler_fn, op_types, rand, roundtrip, run_node_model, unit

from singa import autograd, tensor
from singa.autograd.gradcheck import gradcheck

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_onehot_nonzero_scatter_elements():
    values = np.array([-1.0, 2.0], np.float32)
    model = roundtrip(
        lambda i: autograd.onehot(1, i, 5, values), lambda b: [np.arange(b * 3).reshape(b, 3) % 7 - 3]
    )
    assert "OneHot" in op_types(model)
    assert "NonZero" in op_types(roundtrip(lambda x: autograd.nonzero(autograd.greater(x, 0.2)), unit))
    idx = np.array([[2, 0], [1, 3]])
    model = roundtrip(
        lambda x: autograd.scatter_elements(x, idx, autograd.slice(x, [0, 0], [2, 2], [0, 1]), 1),
        lambda b: [rand((b, 4), seed=10)],
    )
    assert "ScatterElements" in op_types(model)
    roundtrip(
        lambda x: autograd.scatter_elements(x, idx, autograd.slice(x, [0, 0], [2, 2], [0, 1]), 1, "add"),
        lambda b: [rand((b, 4), seed=10)],
        opset=16,
    )


INDEXING = [
    lambda x: autograd.gather(x, 2, [3, 0, 0]),
    lambda x: autograd.where(x, autograd.neg(x), tensor.from_numpy(np.array([True, False, True, True]))),
    lambda x: x[:, 1],
    lambda x: x[..., ::-1],
    lambda x: x[:, None, 1:, -1],
    lambda x: x[:, :, [2, 0]],
]


@pytest.mark.parametrize("fn", INDEXING)
def test_indexing_operators(fn):
    check_export(fn, lambda b: [rand((b, 3, 4))])


# ----- TensorScatter (import, opset 24) ------------------------------------------------------


@pytest.mark.parametrize(
    "mode, axis, starts", [("linear", -2, [0, 2]), ("circular", 1, [3, 1]), ("linear", 2, None)]
)
def test_tensor_scatter_writes_the_update_like_a_loop_and_passes_gradients(mode, axis, starts):
    rng = np.random.default_rng(0)
    past = rng.standard_normal((2, 4, 5, 3))
    ax = axis % 4
    upd_shape = list(past.shape)
    upd_shape[ax] = 2
    update = rng.standard_normal(upd_shape)
    inputs = {"past": past, "update": update} | ({} if starts is None else {"w": np.array(starts, np.int64)})
    (got,) = run_node_model("TensorScatter", inputs, opset=24, mode=mode, axis=axis)
    want = past.copy()
    for n in range(2):
        for s in range(2):
            pos = (0 if starts is None else starts[n]) + s
            pos = pos % past.shape[ax] if mode == "circular" else pos
            dst, src = [n] + [slice(None)] * 3, [n] + [slice(None)] * 3
            dst[ax], src[ax] = pos, s
            want[tuple(dst)] = update[tuple(src)]
    np.testing.assert_array_equal(got, want)
    fn = handler_fn("TensorScatter", opset=24, n_inputs=len(inputs), mode=mode, axis=axis)
    gradcheck(fn, list(inputs.values()), wrt=[0, 1])


def test_tensor_scatter_linear_write_past_the_end_is_named():
    inputs = {"past": np.zeros((1, 3, 2)), "update": np.ones((1, 2, 2)), "w": np.array([2], np.int64)}
    with pytest.raises(ValueError, match=r"TensorScatter node .*positions 2\.\.3 of an axis of 3"):
        run_node_model("TensorScatter", inputs, opset=24, axis=1)
