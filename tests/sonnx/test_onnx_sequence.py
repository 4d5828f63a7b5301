"""ONNX's sequence and optional types (the ``sequence`` family and
``singa/sonnx/values.py``): values against numpy and Python lists, against onnxruntime,
gradients through sequences (float64 finite differences), and clear errors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from sonnx_helpers import param, session

from singa import autograd, sonnx, tensor
from singa.autograd.gradcheck import gradcheck
from singa.sonnx.context import UnsupportedOperator

RNG = np.random.default_rng(0)
F32 = TensorProto.FLOAT


def _tensor_type(elem=F32):
    return helper.make_tensor_type_proto(elem, None)


def _seq_type(elem=F32):
    return helper.make_sequence_type_proto(_tensor_type(elem))


def _opt_type(inner):
    return helper.make_optional_type_proto(inner)


def _vi(name, tp=None):
    return helper.make_value_info(name, tp if tp is not None else _tensor_type())


def _model(nodes, inputs, outputs, inits=(), opset=18):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _ints(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def _ours_and_ort(model, feeds: dict) -> tuple[list, list]:
    """Our outputs and onnxruntime's for the same feeds (lists for sequences)."""
    ours = sonnx.prepare(model).run(dict(feeds))
    try:
        theirs = session(model).run(None, dict(feeds))
    except ImportError:  # pragma: no cover - onnxruntime missing
        pytest.skip("onnxruntime is not installed")
    return ours, theirs


def _assert_same(got, want):
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            _assert_same(g, w)
        return
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6)


# ----- SplitToSequence / ConcatFromSequence -----------------------------------------------


@pytest.mark.parametrize(
    "split, keepdims, want",
    [
        (None, 1, lambda x: [x[:, i : i + 1] for i in range(x.shape[1])]),
        (None, 0, lambda x: [x[:, i] for i in range(x.shape[1])]),
        (2, 1, lambda x: np.split(x, [2, 4], axis=1)),  # chunks of 2, the last shorter
        ([1, 4], 1, lambda x: np.split(x, [1], axis=1)),
    ],
)
def test_split_to_sequence_matches_numpy_and_onnxruntime(split, keepdims, want):
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    inputs, inits = ["x"], []
    if split is not None:
        inputs.append("split")
        inits.append(_ints("split", split))
    node = helper.make_node("SplitToSequence", inputs, ["s"], axis=-1, keepdims=keepdims)
    model = _model([node], [_vi("x")], [_vi("s", _seq_type())], inits)
    ours, theirs = _ours_and_ort(model, {"x": x})
    _assert_same(ours[0], theirs[0])
    _assert_same(ours[0], [np.ascontiguousarray(p) for p in want(x)])


@pytest.mark.parametrize("new_axis, axis", [(0, 0), (0, -1), (1, 0), (1, 2), (1, -1)])
def test_concat_from_sequence_concatenates_or_stacks(new_axis, axis):
    parts = [RNG.standard_normal((2, 3)).astype(np.float32) for _ in range(3)]
    node = helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=axis, new_axis=new_axis)
    model = _model([node], [_vi("s", _seq_type())], [_vi("y")])
    ours, theirs = _ours_and_ort(model, {"s": parts})
    want = np.stack(parts, axis=axis) if new_axis else np.concatenate(parts, axis=axis)
    np.testing.assert_array_equal(ours[0], want)
    np.testing.assert_array_equal(theirs[0], want)


# ----- positions: SequenceAt / Insert / Erase / Length against Python lists ----------------


def _position_model(op, n_in, with_pos):
    names = ["s", "t"][:n_in] + (["p"] if with_pos else [])
    out_type = _tensor_type() if op == "SequenceAt" else _seq_type()
    ins = [_vi("s", _seq_type())] + ([_vi("t")] if n_in > 1 else [])
    ins += [_vi("p", _tensor_type(TensorProto.INT64))] if with_pos else []
    length = helper.make_node("SequenceLength", ["y"] if op != "SequenceAt" else ["s"], ["n"])
    nodes = [helper.make_node(op, names, ["y"]), length]
    return _model(nodes, ins, [_vi("y", out_type), _vi("n", _tensor_type(TensorProto.INT64))])


@pytest.mark.parametrize("pos", [None, 0, 2, 3, -1, -3])
def test_sequence_insert_is_list_insert(pos):
    seq = [np.full((2,), i, np.float32) for i in range(3)]
    t = np.full((2,), 9, np.float32)
    feeds = {"s": seq, "t": t} | ({} if pos is None else {"p": np.int64(pos)})
    y, n = sonnx.prepare(_position_model("SequenceInsert", 2, pos is not None)).run(feeds)
    want = list(seq)
    want.insert(len(seq) if pos is None else pos, t)
    _assert_same(y, want)
    assert n == 4 and n.dtype == np.int64


@pytest.mark.parametrize("pos", [None, 0, 1, -1, -3])
def test_sequence_erase_and_at_are_list_del_and_index(pos):
    seq = [np.full((1, i + 1), i, np.float32) for i in range(3)]
    feeds = {"s": seq} | ({} if pos is None else {"p": np.int64(pos)})
    y, n = sonnx.prepare(_position_model("SequenceErase", 1, pos is not None)).run(feeds)
    want = list(seq)
    del want[-1 if pos is None else pos]
    _assert_same(y, want)
    assert n == 2
    if pos is not None:
        at, n = sonnx.prepare(_position_model("SequenceAt", 1, True)).run(feeds)
        _assert_same(at, seq[pos])
        assert n == 3


@pytest.mark.parametrize("op, pos", [("SequenceAt", 3), ("SequenceAt", -4), ("SequenceErase", 3)])
def test_a_position_out_of_range_is_named(op, pos):
    seq = [np.zeros(2, np.float32)] * 3
    rep = sonnx.prepare(_position_model(op, 1, True))
    with pytest.raises(ValueError, match=rf"{op} node .*position {pos} is out of range .*-3\.\.2"):
        rep.run({"s": seq, "p": np.int64(pos)})


def test_sequence_construct_empty_and_dtypes():
    nodes = [
        helper.make_node("SequenceEmpty", [], ["e"], dtype=TensorProto.INT32),
        helper.make_node("SequenceInsert", ["e", "i"], ["s"]),
        helper.make_node("SequenceConstruct", ["a", "b"], ["ab"]),
    ]
    i32 = _tensor_type(TensorProto.INT32)
    model = _model(
        nodes,
        [_vi("i", i32), _vi("a"), _vi("b")],
        [_vi("s", _seq_type(TensorProto.INT32)), _vi("ab", _seq_type())],
    )
    a, b = np.ones(2, np.float32), np.zeros(3, np.float32)
    s, ab = sonnx.prepare(model).run({"i": np.arange(3, dtype=np.int32), "a": a, "b": b})
    _assert_same(s, [np.arange(3, dtype=np.int32)])
    _assert_same(ab, [a, b])
    with pytest.raises(TypeError, match=r"SequenceInsert node .*different dtypes"):
        sonnx.prepare(model).run({"i": np.arange(3, dtype=np.int64), "a": a, "b": b})
    with pytest.raises(TypeError, match=r"SequenceConstruct node .*different dtypes"):
        sonnx.prepare(model).run({"i": np.arange(3, dtype=np.int32), "a": a, "b": b.astype(np.float64)})


# ----- SequenceMap ----------------------------------------------------------------------


def test_sequence_map_runs_its_body_per_position_with_a_tensor_input():
    body = helper.make_graph(
        [helper.make_node("Add", ["xi", "c"], ["yi"]), helper.make_node("Shape", ["xi"], ["si"])],
        "body",
        [_vi("xi"), _vi("c")],
        [_vi("yi"), _vi("si", _tensor_type(TensorProto.INT64))],
    )
    node = helper.make_node("SequenceMap", ["s", "c"], ["ys", "shapes"], body=body)
    model = _model(
        [node],
        [_vi("s", _seq_type()), _vi("c")],
        [_vi("ys", _seq_type()), _vi("shapes", _seq_type(TensorProto.INT64))],
    )
    seq = [RNG.standard_normal((k, 2)).astype(np.float32) for k in (1, 3)]
    c = np.array(0.5, np.float32)
    ours, theirs = _ours_and_ort(model, {"s": seq, "c": c})
    _assert_same(ours[0], [x + c for x in seq])
    _assert_same(ours[1], [np.array([1, 2]), np.array([3, 2])])
    for o, t in zip(ours, theirs):
        _assert_same(o, t)


def test_sequence_map_refuses_sequences_of_different_lengths():
    body = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])], "b", [_vi("a"), _vi("b")], [_vi("c")]
    )
    node = helper.make_node("SequenceMap", ["s", "t"], ["y"], body=body)
    model = _model([node], [_vi("s", _seq_type()), _vi("t", _seq_type())], [_vi("y", _seq_type())])
    one = np.zeros(2, np.float32)
    with pytest.raises(ValueError, match=r"SequenceMap node .*different lengths \[1, 2\]"):
        sonnx.prepare(model).run({"s": [one], "t": [one, one]})


# ----- optionals --------------------------------------------------------------------------


def _optional_model():
    """y = OptionalGetElement(o) when o has an element, else zeros (an If); h = has element."""
    get = helper.make_graph([helper.make_node("OptionalGetElement", ["o"], ["g"])], "get", [], [_vi("g")])
    zero = helper.make_graph(
        [helper.make_node("Constant", [], ["z"], value=numpy_helper.from_array(np.zeros(2, np.float32)))],
        "zero",
        [],
        [_vi("z")],
    )
    nodes = [
        helper.make_node("Identity", ["o"], ["o2"]),
        helper.make_node("OptionalHasElement", ["o2"], ["h"]),
        helper.make_node("If", ["h"], ["y"], then_branch=get, else_branch=zero),
    ]
    opt = _opt_type(_tensor_type())
    return _model(nodes, [_vi("o", opt)], [_vi("y"), _vi("h", _tensor_type(TensorProto.BOOL))])


@pytest.mark.parametrize("value", [None, np.array([1.0, 2.0], np.float32)])
def test_optional_input_empty_or_full(value):
    y, h = sonnx.prepare(_optional_model()).run([value])
    assert h.dtype == np.bool_ and bool(h) is (value is not None)
    np.testing.assert_array_equal(y, np.zeros(2) if value is None else value)
    # ONNX's own OptionalProto is read with numpy_helper too
    (y2, _) = sonnx.prepare(_optional_model()).run([numpy_helper.from_optional(value, "o")])
    np.testing.assert_array_equal(y2, y)


def test_optional_output_and_empty_element_error():
    nodes = [helper.make_node("Optional", [], ["e"], type=_tensor_type())]
    model = _model(nodes, [], [_vi("e", _opt_type(_tensor_type()))])
    assert sonnx.prepare(model).run([]) == [None]
    nodes.append(helper.make_node("OptionalGetElement", ["e"], ["y"]))
    model = _model(nodes, [], [_vi("y")])
    with pytest.raises(ValueError, match=r"OptionalGetElement node .*the optional is empty"):
        sonnx.prepare(model).run([])


# ----- gradients through sequences ------------------------------------------------------------


def _grad_model():
    """x (4, 3), w (2, 3): s = [w, x[:1], x[1:]]; y = s[-1] @ concat(s).T, and the
    columns of x stacked back (SplitToSequence without split, keepdims 0)."""
    nodes = [
        helper.make_node("SplitToSequence", ["x", "split"], ["s"], axis=0),
        helper.make_node("SequenceInsert", ["s", "w", "zero"], ["s2"]),
        helper.make_node("ConcatFromSequence", ["s2"], ["c"], axis=0),
        helper.make_node("SequenceAt", ["s2", "last"], ["a"]),
        helper.make_node("Transpose", ["c"], ["ct"]),
        helper.make_node("MatMul", ["a", "ct"], ["y"]),
        helper.make_node("SplitToSequence", ["x"], ["cols"], axis=1, keepdims=0),
        helper.make_node("ConcatFromSequence", ["cols"], ["xt"], axis=0, new_axis=1),
    ]
    inits = [_ints("split", [1, 3]), _ints("zero", 0), _ints("last", -1)]
    f64 = _tensor_type(TensorProto.DOUBLE)
    return _model(nodes, [_vi("x", f64), _vi("w", f64)], [_vi("y", f64), _vi("xt", f64)], inits)


def test_sequence_values_forward_and_gradients():
    x, w = RNG.standard_normal((4, 3)), RNG.standard_normal((2, 3))
    y, xt = sonnx.prepare(_grad_model()).run([x, w])
    c = np.concatenate([w, x])
    np.testing.assert_allclose(y, x[1:] @ c.T, rtol=1e-12)
    np.testing.assert_array_equal(xt, x.T)
    graph = sonnx.prepare(_grad_model()).graph

    def both(xx, ww):
        y_, xt_ = graph.run({"x": xx, "w": ww}, {})
        return autograd.add(autograd.reduce_sum(y_), autograd.reduce_sum(autograd.mul(xt_, xt_)))

    gradcheck(both, [x, w])


def test_a_model_trains_through_sequence_at():
    m = sonnx.SONNXModel(_grad_model())
    m.train()
    x = tensor.from_numpy(RNG.standard_normal((4, 3)))
    w = param(RNG.standard_normal((2, 3)))
    y, _ = m.forward(x, w)
    grads = autograd.gradients(autograd.reduce_sum(y))
    # d sum(x[1:] @ c.T) / dw = column sums of x[1:], broadcast over w's rows
    np.testing.assert_allclose(grads[w].to_numpy(), np.tile(x.to_numpy()[1:].sum(0), (2, 1)), rtol=1e-12)


# ----- what is refused, and how ---------------------------------------------------------------


def test_a_sequence_given_to_a_tensor_operator_is_named():
    model = _model(
        [helper.make_node("Relu", ["s"], ["y"], name="relu1")], [_vi("s", _seq_type())], [_vi("y")]
    )
    with pytest.raises(TypeError, match=r"Relu node 'relu1': input 's' is a sequence; Relu takes tensors"):
        sonnx.prepare(model).run([[np.zeros(2, np.float32)]])


def test_a_sequence_input_must_be_a_list():
    model = _model([helper.make_node("SequenceLength", ["s"], ["n"])], [_vi("s", _seq_type())], [_vi("n")])
    assert sonnx.prepare(model).run([[np.zeros(1), np.zeros(2)]])[0] == 2
    with pytest.raises(TypeError, match=r"input 's' is a sequence of tensors: give a list of arrays"):
        sonnx.prepare(model).run([np.zeros(2, np.float32)])


def test_maps_are_refused_at_prepare():
    map_type = onnx.TypeProto()
    map_type.map_type.key_type = TensorProto.INT64
    map_type.map_type.value_type.CopyFrom(_tensor_type())
    model = _model([helper.make_node("Identity", ["m"], ["y"])], [_vi("m", map_type)], [_vi("y", map_type)])
    with pytest.raises(UnsupportedOperator, match=r"value 'm' has type map \(tensors, sequences"):
        sonnx.prepare(model)
    nested = helper.make_sequence_type_proto(_seq_type())
    model = _model([helper.make_node("Identity", ["m"], ["y"])], [_vi("m", nested)], [_vi("y", nested)])
    with pytest.raises(UnsupportedOperator, match=r"value 'm' has type sequence of sequence of tensor"):
        sonnx.prepare(model)


def test_tensors_given_return_tensors_in_sequences():
    model = _model(
        [helper.make_node("SplitToSequence", ["x"], ["s"], keepdims=0)], [_vi("x")], [_vi("s", _seq_type())]
    )
    (s,) = sonnx.prepare(model).run([tensor.from_numpy(np.arange(4, dtype=np.float32).reshape(2, 2))])
    assert isinstance(s, list) and all(isinstance(t, tensor.Tensor) for t in s)
    np.testing.assert_array_equal(s[1].to_numpy(), [2.0, 3.0])


def test_run_node_takes_and_returns_sequences():
    a, b = np.ones(2, np.float32), np.zeros(3, np.float32)
    (n,) = sonnx.run_node(helper.make_node("SequenceLength", ["s"], ["n"]), [[a, b]])
    assert n == 2
    proto = numpy_helper.from_list([a, b], "s")  # ONNX's own SequenceProto is read too
    (s,) = sonnx.run_node(helper.make_node("SequenceErase", ["s"], ["y"]), [proto])
    _assert_same(s, [a])
    (parts,) = sonnx.run_node(
        helper.make_node("SplitToSequence", ["x"], ["y"], keepdims=0), [np.eye(2, dtype=np.float32)]
    )
    _assert_same(parts, [np.eye(2, dtype=np.float32)[0], np.eye(2, dtype=np.float32)[1]])
