"""sonnx.prepare's inference path: traced, fused replays (singa.sonnx.replay)."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from singa import sonnx
from singa.sonnx import replay
from singa.tensor import Tensor
from singa.zoo import resnet

RNG = np.random.default_rng(0)
X4 = (2, 3, 6, 6)


def init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def f32(*shape, low=-1.0):
    return (RNG.random(shape) * (1 - low) + low).astype(np.float32)


def one_node(op, shape=X4, inits=(), attrs=None, extra_inputs=(), out_shape=None, nodes_before=(), opset=13):
    """A graph X -> op(X, *extra_inputs) -> Y with the given initializers."""
    node = helper.make_node(op, ["X", *extra_inputs], ["Y"], **(attrs or {}))
    g = helper.make_graph(
        [*nodes_before, node],
        op,
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        list(inits),
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), shape


#: one small graph per replayable operator type: (model, input shape)
CASES = {
    "Add": lambda: one_node("Add", inits=[init("B", f32(6))], extra_inputs=["B"]),
    "AveragePool": lambda: one_node("AveragePool", attrs={"kernel_shape": [2, 2], "strides": [2, 2]}),
    "BatchNormalization": lambda: one_node(
        "BatchNormalization",
        inits=[init(n, f32(3, low=0.2)) for n in ("s", "b", "m", "v")],
        extra_inputs=["s", "b", "m", "v"],
    ),
    "Clip": lambda: one_node(
        "Clip", inits=[init("lo", np.float32(-0.3)), init("hi", np.float32(0.4))], extra_inputs=["lo", "hi"]
    ),
    "Concat": lambda: one_node(
        "Concat", inits=[init("C", f32(2, 1, 6, 6))], extra_inputs=["C"], attrs={"axis": 1}
    ),
    "Constant": lambda: one_node(
        "Mul",
        extra_inputs=["K"],
        nodes_before=[helper.make_node("Constant", [], ["K"], value=init("k", f32(6)))],
    ),
    "Conv": lambda: one_node(
        "Conv",
        inits=[init("W", f32(4, 3, 3, 3)), init("B", f32(4))],
        extra_inputs=["W", "B"],
        attrs={"pads": [1] * 4},
    ),
    "Div": lambda: one_node("Div", inits=[init("B", f32(6, low=0.5))], extra_inputs=["B"]),
    "Dropout": lambda: one_node("Dropout"),
    "Flatten": lambda: one_node("Flatten"),
    "Gemm": lambda: one_node(
        "Gemm",
        (2, 5),
        inits=[init("W", f32(4, 5)), init("B", f32(4))],
        extra_inputs=["W", "B"],
        attrs={"transB": 1},
    ),
    "GlobalAveragePool": lambda: one_node("GlobalAveragePool"),
    "Identity": lambda: one_node("Identity"),
    "LeakyRelu": lambda: one_node("LeakyRelu", attrs={"alpha": 0.1}),
    "LogSoftmax": lambda: one_node("LogSoftmax", (2, 5)),
    "MatMul": lambda: one_node("MatMul", (2, 5), inits=[init("W", f32(5, 3))], extra_inputs=["W"]),
    "MaxPool": lambda: one_node("MaxPool", attrs={"kernel_shape": [3, 3], "strides": [1, 1]}),
    "Mul": lambda: one_node("Mul", inits=[init("B", f32(6))], extra_inputs=["B"]),
    "Relu": lambda: one_node("Relu"),
    "Reshape": lambda: one_node(
        "Reshape", inits=[init("S", np.array([2, -1], np.int64))], extra_inputs=["S"]
    ),
    "Sigmoid": lambda: one_node("Sigmoid"),
    "Softmax": lambda: one_node("Softmax", (2, 5)),
    "Sub": lambda: one_node("Sub", inits=[init("B", f32(6))], extra_inputs=["B"]),
    "Tanh": lambda: one_node("Tanh"),
    "Transpose": lambda: one_node("Transpose", attrs={"perm": [0, 2, 3, 1]}),
    "Einsum": lambda: one_node(
        "Einsum", (2, 5), inits=[init("W", f32(5, 3))], extra_inputs=["W"], attrs={"equation": "ij,jk->ik"}
    ),
    "Erf": lambda: one_node("Erf"),
    "Gather": lambda: one_node(
        "Gather",
        inits=[init("I", np.array([[2, 0], [1, 1]], np.int64))],
        extra_inputs=["I"],
        attrs={"axis": 2},
    ),
    "HardSigmoid": lambda: one_node("HardSigmoid", attrs={"alpha": 0.3}),
    "HardSwish": lambda: one_node("HardSwish"),
    "LayerNormalization": lambda: one_node(
        "LayerNormalization", inits=[init("g", f32(6)), init("b", f32(6))], extra_inputs=["g", "b"]
    ),
    "Pad": lambda: one_node(
        "Pad", inits=[init("P", np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64))], extra_inputs=["P"]
    ),
    "ReduceMean": lambda: one_node("ReduceMean", attrs={"axes": [1, 3], "keepdims": 0}),
    "Resize": lambda: one_node(
        "Resize",
        inits=[init("s", np.array([1, 1, 2, 1.5], np.float32))],
        extra_inputs=["", "s"],
        attrs={"mode": "linear"},
    ),
    "Slice": lambda: one_node(
        "Slice",
        inits=[
            init(n, np.array(v, np.int64))
            for n, v in (("st", [1, 0]), ("en", [6, 5]), ("ax", [2, 3]), ("sp", [2, 1]))
        ],
        extra_inputs=["st", "en", "ax", "sp"],
    ),
    "Squeeze": lambda: one_node(
        "Squeeze", (2, 1, 6, 6), inits=[init("A", np.array([1], np.int64))], extra_inputs=["A"]
    ),
    "Unsqueeze": lambda: one_node(
        "Unsqueeze", inits=[init("A", np.array([0, 3], np.int64))], extra_inputs=["A"]
    ),
    "Abs": lambda: one_node("Abs"),
    "Cast": lambda: one_node("Cast", attrs={"to": TensorProto.DOUBLE}),
    "Exp": lambda: one_node("Exp"),
    "Expand": lambda: one_node(
        "Expand", (2, 3, 1, 6), inits=[init("S", np.array([2, 3, 4, 6], np.int64))], extra_inputs=["S"]
    ),
    "Gelu": lambda: one_node("Gelu", opset=20),
    "Log": lambda: one_node("Log"),  # NaN where X < 0 on both sides
    "Max": lambda: one_node("Max", inits=[init("B", f32(6))], extra_inputs=["B"]),
    "Min": lambda: one_node("Min", inits=[init("B", f32(6))], extra_inputs=["B"]),
    "Neg": lambda: one_node("Neg"),
    "Pow": lambda: one_node("Pow", inits=[init("E", np.float32(2.0))], extra_inputs=["E"]),
    "ReduceMax": lambda: one_node("ReduceMax", attrs={"axes": [2], "keepdims": 1}),
    "ReduceSum": lambda: one_node(
        "ReduceSum", inits=[init("A", np.array([1, 3], np.int64))], extra_inputs=["A"]
    ),
    "Softplus": lambda: one_node("Softplus"),
    "Split": lambda: one_node(
        "Split", inits=[init("P", np.array([2, 4], np.int64))], extra_inputs=["P"], attrs={"axis": 3}
    ),
    "Sqrt": lambda: one_node("Sqrt"),  # NaN where X < 0 on both sides
    "Tile": lambda: one_node("Tile", inits=[init("R", np.array([1, 2, 1, 3], np.int64))], extra_inputs=["R"]),
    "Where": lambda: _where(),
}


def _where():
    m, shape = one_node(
        "Where", inits=[init("C", RNG.random(6) > 0.5), init("B", f32(6))], extra_inputs=["X", "B"]
    )
    m.graph.node[-1].input[0] = "C"  # Where(C, X, B): the condition first, X the data
    return m, shape


def test_every_replayable_operator_has_a_case():
    assert set(CASES) == set(replay.REPLAYABLE)


@pytest.mark.parametrize("op", sorted(CASES))
def test_replay_of_each_operator_follows_new_inputs_bitwise(op):
    m, shape = CASES[op]()
    rep = sonnx.prepare(m, fold_batchnorm=False)
    eager = sonnx.prepare(m, use_graph=False)
    assert rep.replays.enabled
    for _ in range(3):  # new values every run: nothing computed from the input may be frozen
        x = f32(*shape)
        np.testing.assert_array_equal(rep.run([x])[0], eager.run([x])[0])
    assert rep.replays.traces == 1


def exported_resnet(tmp_path, batch=2):
    m = resnet.resnet8(num_classes=4, num_channels=3)
    x = Tensor(data=f32(batch, 3, 8, 8))
    m.compile([x], is_train=False)
    rng = np.random.default_rng(2)
    for name, t in m.get_states().items():
        owner, _, kind = name.rpartition(".")
        if "bn" in owner.rsplit(".", 1)[-1] and kind in ("running_var", "scale"):
            t.copy_from_numpy((rng.random(t.shape) * 0.8 + 0.6).astype(np.float32))
        elif "bn" in owner.rsplit(".", 1)[-1] and kind in ("running_mean", "bias"):
            t.copy_from_numpy((rng.standard_normal(t.shape) * 0.1).astype(np.float32))
    m.eval()
    path = str(tmp_path / "resnet8.onnx")
    sonnx.export_model(m, path, [x])
    return path


def test_prepared_resnet_folds_batchnorm_and_matches_node_by_node(tmp_path):
    path = exported_resnet(tmp_path)
    rep, eager = sonnx.prepare(path), sonnx.prepare(path, use_graph=False)
    bns = sum(nd.op_type == "BatchNormalization" for nd in onnx.load(path).graph.node)
    for batch in (2, 1, 2):
        x = f32(batch, 3, 8, 8)
        want = eager.run([x])[0]
        assert batch == 1 or np.ptp(want, axis=0).min() > 1e-4  # samples differ: a real test
        got = rep.run([x])[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
        np.testing.assert_array_equal(rep.run([x])[0], got)  # every run gives the same bits
    assert rep.replays.traces == 2  # one per input shape
    assert rep.replays.fusions()["conv+batchnorm"] == 2 * bns
    adds = sum(nd.op_type == "Add" for nd in onnx.load(path).graph.node)
    assert adds and rep.replays.fusions()["conv+add"] == rep.replays.fusions()["residual+relu"] == 2 * adds


def test_prepared_resnet_without_folding_is_bitwise(tmp_path):
    path = exported_resnet(tmp_path)
    rep, eager = sonnx.prepare(path, fold_batchnorm=False), sonnx.prepare(path, use_graph=False)
    x = f32(2, 3, 8, 8)
    np.testing.assert_array_equal(rep.run([x])[0], eager.run([x])[0])
    np.testing.assert_array_equal(rep.run([x])[0], eager.run([x])[0])
    assert "conv+batchnorm" not in rep.replays.fusions()


def test_tensors_in_tensors_out_and_aux_outputs_are_keyed(tmp_path):
    path = exported_resnet(tmp_path)
    rep, eager = sonnx.prepare(path, fold_batchnorm=False), sonnx.prepare(path, use_graph=False)
    x = f32(2, 3, 8, 8)
    (y,) = rep.run([Tensor(data=x)])
    assert isinstance(y, Tensor)
    first = onnx.load(path).graph.node[0].output[0]
    got = rep.run([x], aux_output=[first])
    want = eager.run([x], aux_output=[first])
    assert len(got) == 2
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(rep.run([x], last_layers=-3)[0], eager.run([x], last_layers=-3)[0])
    assert rep.replays.traces == 3


def test_replaced_parameter_array_retraces_and_clear_forgets(tmp_path):
    path = exported_resnet(tmp_path)
    rep = sonnx.prepare(path)
    x = f32(2, 3, 8, 8)
    before = rep.run([x])[0]
    name = next(n for n in rep.params if rep.params[n].ndim() == 4)
    rep.params[name].data = rep.params[name].data * 0.5  # a new array
    after = rep.run([x])[0]
    assert rep.replays.traces == 2 and not np.allclose(after, before)
    rep.params[name].data *= 2.0  # in place: documented to need clear()
    rep.replays.clear()
    np.testing.assert_allclose(rep.run([x])[0], before, rtol=1e-5, atol=1e-6)


def _two_inputs(nodes, second):
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 6]), second],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_graphs_with_other_operators_run_node_by_node():
    m, _ = one_node("TopK", (2, 6), inits=[init("K", np.array([3], np.int64))], extra_inputs=["K"])
    m.graph.output.extend([helper.make_tensor_value_info("I", TensorProto.INT64, None)])
    m.graph.node[0].output.append("I")
    rep = sonnx.prepare(m)
    x = f32(2, 6)
    np.testing.assert_array_equal(rep.run([x])[0], -np.sort(-x, axis=1)[:, :3])
    assert not rep.replays.enabled and rep.replays.traces == 0


def test_a_shape_read_from_data_is_not_replayed():
    s = helper.make_tensor_value_info("S", TensorProto.INT64, [2])
    m = _two_inputs([helper.make_node("Reshape", ["X", "S"], ["Y"])], s)
    assert not sonnx.prepare(m).replays.enabled
    m = _two_inputs(
        [helper.make_node("Identity", ["S"], ["T"]), helper.make_node("Reshape", ["X", "T"], ["Y"])], s
    )
    assert not sonnx.prepare(m).replays.enabled


def test_shapes_computed_from_shapes_are_static_and_replayed():
    """Shape -> Gather -> Concat -> Reshape (what torch.onnx writes for x.view(n, -1)):
    the same for every run of a signature, so the trace may freeze it; a new batch size
    is a new signature, traced anew."""
    nodes = [
        helper.make_node("Shape", ["X"], ["S"]),
        helper.make_node("Constant", [], ["Z"], value=init("z", np.array(0, np.int64))),
        helper.make_node("Gather", ["S", "Z"], ["N"], axis=0),
        helper.make_node("Unsqueeze", ["N", "A"], ["N1"]),
        helper.make_node("Concat", ["N1", "M"], ["T"], axis=0),
        helper.make_node("Reshape", ["X", "T"], ["R"]),
        helper.make_node("Slice", ["R", "st", "en"], ["Y"]),
    ]
    inits = [init("A", np.array([0], np.int64)), init("M", np.array([-1], np.int64))]
    inits += [init("st", np.array([0, 1], np.int64)), init("en", np.array([9, 30], np.int64))]
    m, _ = one_node("Identity", (2, 3, 2, 2), inits=inits, nodes_before=nodes[:-1])
    m.graph.node[-1].CopyFrom(nodes[-1])
    rep, eager = sonnx.prepare(m), sonnx.prepare(m, use_graph=False)
    assert rep.replays.enabled
    for n in (2, 2, 5, 5, 2):
        x = f32(n, 3, 2, 2)
        np.testing.assert_array_equal(rep.run([x])[0], eager.run([x])[0])
        np.testing.assert_array_equal(rep.run([x])[0], x.reshape(n, -1)[:, 1:])
    assert rep.replays.traces == 2


def test_random_operators_and_subgraphs_are_never_replayed():
    m, _ = one_node(
        "Add", extra_inputs=["R"], nodes_before=[helper.make_node("RandomNormal", [], ["R"], shape=[6])]
    )
    assert not sonnx.prepare(m).replays.enabled


def test_traces_per_model_stay_bounded():
    m, _ = one_node("Relu", (1, 3))
    rep = sonnx.prepare(m)
    for n in range(1, replay.MAX_GRAPHS + 4):
        rep.run([f32(n, 3)])
    assert len(rep.replays._graphs) == replay.MAX_GRAPHS


def test_prepared_cnn_fuses_bias_and_relu_bitwise(tmp_path):
    from singa.zoo import cnn

    m = cnn.CNN(num_classes=4, kernels=(3, 5), hidden=7)
    x = Tensor(data=f32(2, 1, 16, 16))
    m.compile([x], is_train=False)
    m.eval()
    path = str(tmp_path / "cnn.onnx")
    sonnx.export_model(m, path, [x])
    rep, eager = sonnx.prepare(path), sonnx.prepare(path, use_graph=False)
    for _ in range(2):
        xs = f32(2, 1, 16, 16)
        np.testing.assert_array_equal(rep.run([xs])[0], eager.run([xs])[0])
    assert rep.replays.fusions() == {"conv+relu": 2, "activated+maxpool": 2, "linear+relu": 1}


def test_conv_weights_are_kept_in_the_products_layout_and_stay_live():
    """prepare keeps a Conv's weight initializer in the layout the convolution's
    products read (same values, no copy per run); changes made in place still reach
    node-by-node runs, and a grouped Conv keeps its weights as given."""
    W = f32(5, 6, 3, 3)
    model, shape = one_node("Conv", shape=(2, 6, 7, 7), inits=[init("W", W)], extra_inputs=["W"])
    rep = sonnx.prepare(model, use_graph=False)
    w = rep.params["W"].data
    assert w.transpose(0, 2, 3, 1).flags.c_contiguous
    np.testing.assert_array_equal(w, W)
    x = f32(*shape)
    y = rep.run([x])[0]
    w *= 2.0
    np.testing.assert_allclose(rep.run([x])[0], 2 * y, rtol=1e-6)
    Wg = f32(6, 3, 3, 3)
    grouped, _ = one_node("Conv", shape=shape, inits=[init("W", Wg)], extra_inputs=["W"], attrs={"group": 2})
    assert sonnx.prepare(grouped).params["W"].data.flags.c_contiguous


def test_prepared_3x3_conv_runs_as_winograd_unless_folding_is_off():
    """With ``fold_batchnorm`` (the default) a 3x3 Conv of 8+ channels replays as a
    Winograd convolution: onnxruntime's result to float32 rounding; without it, the
    bits of node-by-node evaluation."""
    import onnxruntime as ort

    W = f32(8, 8, 3, 3)
    model, _ = one_node(
        "Conv", shape=(2, 8, 9, 9), inits=[init("W", W)], extra_inputs=["W"], attrs={"pads": [1, 1, 1, 1]}
    )
    x = f32(2, 8, 9, 9)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"X": x})[0]
    rep = sonnx.prepare(model)
    got = rep.run([x])[0]
    assert rep.replays.fusions() == {"conv/winograd": 1}
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5 * np.abs(want).max())
    exact = sonnx.prepare(model, fold_batchnorm=False)
    np.testing.assert_array_equal(exact.run([x])[0], sonnx.prepare(model, use_graph=False).run([x])[0])
    assert exact.replays.fusions() == {}


def test_sonnx_model_keeps_graph_mode_off_where_a_trace_would_freeze_data():
    """Training graph mode traces too: a graph reading indices from data (TopK's, for a
    Gather) runs eagerly, with a warning, and follows each new input; a replayable graph
    keeps graph mode."""
    nodes = [
        helper.make_node("TopK", ["X", "K"], ["V", "I"], axis=1),
        helper.make_node("Gather", ["W", "I"], ["G"], axis=0),
        helper.make_node("Add", ["V", "G"], ["Y"]),
    ]
    m, _ = one_node("Identity", (2, 6), inits=[init("K", np.array([3], np.int64)), init("W", f32(6))])
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    model = sonnx.SONNXModel(m)
    x0 = Tensor(data=f32(2, 6))
    with pytest.warns(RuntimeWarning, match="graph mode stays off"):
        model.compile([x0], is_train=False, use_graph=True)
    assert not model.graph_mode
    w = model.params[next(iter(model.params))].to_numpy()
    for _ in range(2):
        x = f32(2, 6)
        idx = np.argsort(-x, axis=1, kind="stable")[:, :3]
        want = np.take_along_axis(x, idx, 1) + w[idx]
        np.testing.assert_allclose(model(Tensor(data=x))[0].to_numpy(), want, rtol=1e-6)
    plain, _ = CASES["Slice"]()
    kept = sonnx.SONNXModel(plain)
    kept.compile([Tensor(data=f32(*X4))], is_train=False, use_graph=True)
    assert kept.graph_mode


@pytest.mark.parametrize("op", ["LayerNormalization", "BatchNormalization"])
def test_statistics_outputs_are_not_replayed(op):
    """LayerNormalization's mean / inverse deviation and BatchNormalization's training
    statistics are computed outside the recorded operators: with them the graph runs
    node by node (ONNX's node cases found both frozen in a trace)."""
    m, _ = CASES[op]()
    assert sonnx.prepare(m).replays.enabled
    m.graph.node[-1].output.extend(["M", "V"])
    if op == "BatchNormalization":
        m.graph.node[-1].attribute.extend([helper.make_attribute("training_mode", 1)])
    assert not sonnx.prepare(m).replays.enabled
