"""ONNX export and import of the shape family (singa.autograd.shape), operator by operator."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from sonnx_helpers import check_export, op_types, param, rand

from singa import autograd, sonnx, tensor


# ----- tile ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "repeats,rank",
    [((1, 2, 3), 3), ((2,), 3), ((2, 1, 1, 2), 4)],  # one per axis; the last axis; a leading axis
)
def test_tile_exports_and_runs_in_onnxruntime(repeats, rank):
    def fn(x):
        return autograd.tile(x, repeats)

    model = check_export(fn, lambda b: [rand((b, 3, 2))])  # two batch sizes, against our output
    nodes = [t for t in op_types(model) if t != "Constant"]
    assert nodes == (["Unsqueeze", "Tile"] if rank == 4 else ["Tile"])  # a leading axis: Unsqueeze first


def test_tile_along_the_batch_axis_exports_with_a_fixed_batch():
    check_export(
        lambda x: autograd.tile(x, (2, 1)), lambda b: [rand((b, 3))], batches=(3,), dynamic_batch=False
    )


def _tile_model(shape: tuple, repeats: list) -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    reps = helper.make_tensor("repeats", TensorProto.INT64, [len(repeats)], repeats)
    node = helper.make_node("Tile", ["x", "repeats"], ["y"])
    graph = helper.make_graph([node], "tile", [x], [y], initializer=[reps])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_tile_imports_against_numpy():
    x = rand((2, 3, 4))
    (got,) = sonnx.prepare(_tile_model(x.shape, [2, 1, 3])).run([x])
    np.testing.assert_array_equal(got, np.tile(x, (2, 1, 3)))


def test_tile_roundtrip_through_our_importer():
    x = rand((3, 2, 2))
    model = sonnx.to_onnx([tensor.from_numpy(x)], lambda t: autograd.tile(t, (1, 3, 2)))
    (got,) = sonnx.prepare(model).run([x])
    np.testing.assert_array_equal(got, np.tile(x, (1, 3, 2)))


# ----- bitcast ------------------------------------------------------------------------------------
def test_bitcast_reinterprets_the_bytes():
    from sonnx_helpers import run_node_model

    x = np.array([1.0, -2.5], np.float32)
    (got,) = run_node_model("BitCast", {"x": x}, opset=26, to=TensorProto.INT32)
    np.testing.assert_array_equal(got, x.view(np.int32))


SHAPE = [
    lambda x: autograd.reshape(x, (x.shape[0], -1)),
    lambda x: autograd.reshape(x, (x.shape[0] * 3, 4)),
    lambda x: autograd.flatten(x, 2),
    lambda x: autograd.transpose(x),
    lambda x: autograd.transpose(x, (0, 2, 1)),
    lambda x: autograd.cat([x, autograd.neg(x)], 1),
    lambda x: autograd.cat(list(autograd.split(x, 2, [1, 3])), 2),
    lambda x: autograd.split(x, 1, 3)[-1],
    lambda x: autograd.slice(x, [1, 0], [3, -1], [1, 2]),
    lambda x: autograd.slice(x, [-1], [0], [2], [-2]),
    lambda x: autograd.slice(x, [0], [x.shape[0]], [0]),
    lambda x: autograd.squeeze(autograd.unsqueeze(x, [1, -1])),
    lambda x: autograd.squeeze(autograd.unsqueeze(x, 1), 1),
    lambda x: autograd.pad(x, "constant", [0, 1, 2, 0, 0, 1], 0.5),
    lambda x: autograd.pad(x, "reflect", [0, 1, 2, 0, 1, 1]),
    lambda x: autograd.pad(x, "edge", [0, 0, 1, 0, 2, 0]),
    lambda x: autograd.expand(autograd.unsqueeze(x, 1), (x.shape[0], 2, 3, 4)),
]


@pytest.mark.parametrize("fn", SHAPE)
def test_shape_operators(fn):
    check_export(fn, lambda b: [rand((b, 3, 4))])


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_opset_dependent_shape_forms(opset):
    def f(x):
        y = autograd.squeeze(autograd.unsqueeze(x, 0), 0)
        parts = autograd.split(y, 1, 3)
        return autograd.layer_norm(autograd.cat(list(parts), 1), SCALE, None)

    check_export(f, lambda b: [rand((b, 6))], opset=opset)


SCALE = param(rand((6,), seed=7), "scale")
