"""A bad ONNX file or graph is refused at prepare time with one error naming the file
and the initializer or node (never a raw protobuf or numpy error, never at run)."""

import os
import tracemalloc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from singa import sonnx
from singa.sonnx import InvalidModel


def _model(nodes, inputs=("x",), outputs=("y",), initializers=()):
    graph = helper.make_graph(
        list(nodes),
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in outputs],
        initializer=list(initializers),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _relu_model():
    b = numpy_helper.from_array(np.ones((2, 3), np.float32), "b")
    return _model(
        [helper.make_node("Add", ["x", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])], initializers=[b]
    )


def test_a_good_model_runs(tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save(_relu_model(), p)
    (y,) = sonnx.prepare(str(p)).run([np.full((2, 3), -2, np.float32)])
    assert (y == 0).all()


@pytest.mark.parametrize("keep", [0.3, 0.9, 0.99])
def test_truncated_file_names_the_file(tmp_path, keep):
    raw = _relu_model().SerializeToString()
    p = tmp_path / "cut.onnx"
    p.write_bytes(raw[: int(len(raw) * keep)])
    with pytest.raises(InvalidModel, match=r"cut\.onnx.*(truncated|no graph|no nodes|defines|initializer)"):
        sonnx.prepare(str(p))


def test_special_files_are_refused(tmp_path):
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "f.onnx")
        with pytest.raises(InvalidModel, match="not a regular file .*FIFO"):
            sonnx.prepare(str(tmp_path / "f.onnx"))
    with pytest.raises(InvalidModel, match="not a regular file .*directory"):
        sonnx.prepare(str(tmp_path))


def test_initializer_whose_data_does_not_match_its_dims(tmp_path):
    m = _relu_model()
    m.graph.initializer[0].raw_data = m.graph.initializer[0].raw_data[:-4]
    with pytest.raises(InvalidModel, match=r"initializer 'b' declares dims \[2, 3\] .* holds 20 bytes"):
        sonnx.prepare(m)
    m = _relu_model()
    t = TensorProto(name="b", data_type=TensorProto.FLOAT, dims=[2, 3], float_data=[1.0] * 5)
    m.graph.initializer[0].CopyFrom(t)
    with pytest.raises(InvalidModel, match="initializer 'b' .* holds 5 values"):
        sonnx.prepare(m)


def test_huge_declared_initializer_is_refused_before_any_allocation(tmp_path):
    m = _relu_model()
    del m.graph.initializer[0].dims[:]
    m.graph.initializer[0].dims.extend([1 << 20, 1 << 20])
    p = tmp_path / "huge.onnx"
    onnx.save(m, p)
    tracemalloc.start()
    try:
        with pytest.raises(InvalidModel, match=r"huge\.onnx.*initializer 'b' declares dims"):
            sonnx.prepare(str(p))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


def test_external_data_larger_than_its_file(tmp_path):
    m = _relu_model()
    from onnx import external_data_helper

    external_data_helper.convert_model_to_external_data(m, location="ext.bin", size_threshold=0)
    onnx.save(m, str(tmp_path / "ext.onnx"))
    (y,) = sonnx.prepare(str(tmp_path / "ext.onnx")).run([np.zeros((2, 3), np.float32)])
    assert (y == 1).all()  # whole external data loads
    with open(tmp_path / "ext.bin", "r+b") as f:
        f.truncate(8)
    with pytest.raises(
        InvalidModel, match=r"ext\.onnx.*initializer 'b' declares .* external data 'ext.bin' holds 8"
    ):
        sonnx.prepare(str(tmp_path / "ext.onnx"))


def test_a_graph_without_nodes():
    with pytest.raises(InvalidModel, match="the graph has no nodes"):
        sonnx.prepare(_model([], outputs=("x",)))


def test_undefined_input_names_the_node():
    m = _model([helper.make_node("Add", ["x", "w"], ["y"], name="add1")])
    with pytest.raises(
        InvalidModel, match="Add node 'add1' reads 'w', which no graph input, initializer or node"
    ):
        sonnx.prepare(m)


def test_a_cycle_is_named_at_prepare_time():
    m = _model(
        [
            helper.make_node("Add", ["x", "c"], ["a"], name="n1"),
            helper.make_node("Relu", ["a"], ["b"], name="n2"),
            helper.make_node("Relu", ["b"], ["c"], name="n3"),
            helper.make_node("Relu", ["b"], ["y"], name="n4"),
        ]
    )
    with pytest.raises(
        InvalidModel,
        match="cycle: Add node 'n1' -> Relu node 'n2' -> Relu node 'n3' -> Add node 'n1'|cycle: .*n1.*n2.*n3",
    ):
        sonnx.prepare(m)


def test_nodes_out_of_order_are_named():
    m = _model(
        [
            helper.make_node("Relu", ["a"], ["y"], name="late"),
            helper.make_node("Relu", ["x"], ["a"], name="early"),
        ]
    )
    with pytest.raises(InvalidModel, match="Relu node 'late' reads 'a' before Relu node 'early' produces it"):
        sonnx.prepare(m)


def test_graph_output_that_nothing_produces():
    m = _model([helper.make_node("Relu", ["x"], ["z"])], outputs=("y",))
    with pytest.raises(InvalidModel, match="graph output 'y' is not produced"):
        sonnx.prepare(m)


def test_sonnx_model_names_the_file(tmp_path):
    m = _relu_model()
    m.graph.initializer[0].raw_data = b"\0" * 4
    p = tmp_path / "bad.onnx"
    onnx.save(m, p)
    with pytest.raises(InvalidModel, match=r"bad\.onnx.*initializer 'b'"):
        sonnx.SONNXModel(str(p))
