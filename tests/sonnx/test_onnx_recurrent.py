"""ONNX RNN, GRU and LSTM import: every direction and layout against numpy twins of
ONNX's equations and onnxruntime, float64 gradients through the unrolled graph, and
PyTorch's LSTM (when torch imports)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper
from sonnx_helpers import handler_fn, node_model, ort_node_model, run_node_model

from singa import sonnx
from singa.autograd.gradcheck import gradcheck

RNG = np.random.default_rng(0)
sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731


def _lstm_twin(x, w, r, b, h0, c0):
    """ONNX LSTM, forward direction, gates i, o, f, c (numpy)."""
    hs = r.shape[-1]
    h, c, ys = h0, c0, []
    for x_t in x:
        v = x_t @ w.T + h @ r.T + b[: 4 * hs] + b[4 * hs :]
        i, o, f, g = (v[:, k * hs : (k + 1) * hs] for k in range(4))
        c = sig(f) * c + sig(i) * np.tanh(g)
        h = sig(o) * np.tanh(c)
        ys.append(h)
    return np.stack(ys), h, c


def _gru_twin(x, w, r, b, h0):
    hs = r.shape[-1]
    h, ys = h0, []
    wb, rb = b[: 3 * hs], b[3 * hs :]
    for x_t in x:
        xp = x_t @ w.T + wb
        z = sig(xp[:, :hs] + h @ r[:hs].T + rb[:hs])
        rr = sig(xp[:, hs : 2 * hs] + h @ r[hs : 2 * hs].T + rb[hs : 2 * hs])
        cand = np.tanh(xp[:, 2 * hs :] + (rr * h) @ r[2 * hs :].T + rb[2 * hs :])
        h = (1 - z) * cand + z * h
        ys.append(h)
    return np.stack(ys), h


def _weights(gates, hs, n_in, dirs=1):
    return (
        RNG.standard_normal((dirs, gates * hs, n_in)).astype(np.float32) * 0.5,
        RNG.standard_normal((dirs, gates * hs, hs)).astype(np.float32) * 0.5,
        RNG.standard_normal((dirs, 2 * gates * hs)).astype(np.float32) * 0.5,
    )


def test_lstm_matches_numpy_twin():
    x = RNG.standard_normal((5, 2, 3)).astype(np.float32)
    w, r, b = _weights(4, 4, 3)
    h0, c0 = (
        RNG.standard_normal((1, 2, 4)).astype(np.float32),
        RNG.standard_normal((1, 2, 4)).astype(np.float32),
    )
    model = node_model("LSTM", {"x": x, "c_w": w, "c_r": r, "c_b": b}, 3, hidden_size=4)
    node = model.graph.node[0]
    node.input.extend(["", "c_h", "c_c"])
    model.graph.initializer.extend([numpy_helper.from_array(h0, "c_h"), numpy_helper.from_array(c0, "c_c")])
    y, yh, yc = sonnx.prepare(model).run([x])
    wy, wh, wc = _lstm_twin(x, w[0], r[0], b[0], h0[0], c0[0])
    np.testing.assert_allclose(y[:, 0], wy, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(yh[0], wh, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(yc[0], wc, rtol=1e-5, atol=1e-6)


def test_gru_matches_numpy_twin():
    x = RNG.standard_normal((4, 3, 2)).astype(np.float32)
    w, r, b = _weights(3, 5, 2)
    y, yh = run_node_model("GRU", {"x": x, "c_w": w, "c_r": r, "c_b": b}, 2, hidden_size=5)
    wy, wh = _gru_twin(x, w[0], r[0], b[0], np.zeros((3, 5), np.float32))
    np.testing.assert_allclose(y[:, 0], wy, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(yh[0], wh, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize(("direction", "layout"), [("bidirectional", 0), ("reverse", 1)])
def test_directions_and_layouts_like_onnxruntime(op, direction, layout):
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    dirs = 2 if direction == "bidirectional" else 1
    x = RNG.standard_normal((2, 4, 3) if layout else (4, 2, 3)).astype(np.float32)
    w, r, b = _weights(gates, 3, 3, dirs)
    ins = {"x": x, "c_w": w, "c_r": r, "c_b": b}
    got = run_node_model(op, ins, 2, hidden_size=3, direction=direction, layout=layout)
    if layout:  # onnxruntime runs layout 0 only: feed it the sequence-major input
        ins["x"] = x.transpose(1, 0, 2)
    want = ort_node_model(op, ins, 2, hidden_size=3, direction=direction)
    if layout:
        want = [want[0].transpose(2, 0, 1, 3), want[1].transpose(1, 0, 2)]
    for g, wv in zip(got, want):
        np.testing.assert_allclose(g, wv, rtol=1e-5, atol=1e-5)


def test_sequence_lengths_keep_states_like_onnxruntime():
    x = RNG.standard_normal((4, 3, 2)).astype(np.float32)
    w, r, b = _weights(3, 2, 2)
    ins = {"x": x, "c_w": w, "c_r": r, "c_b": b, "c_l": np.array([4, 2, 1], np.int32)}
    got = run_node_model("GRU", ins, 2, hidden_size=2)
    want = ort_node_model("GRU", ins, 2, hidden_size=2)
    for g, wv in zip(got, want):
        np.testing.assert_allclose(g, wv, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_float64_gradients_through_the_unrolled_cell(op):
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    x = RNG.standard_normal((3, 2, 2))
    w, r, b = (a.astype(np.float64) for a in _weights(gates, 2, 2))
    gradcheck(handler_fn(op, n_inputs=4, hidden_size=2), [x, w, r, b])


def test_lstm_matches_torch():
    try:
        import torch
    except Exception:
        pytest.skip("torch is not importable")
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(3, 4)
    x = np.random.default_rng(1).standard_normal((5, 2, 3)).astype(np.float32)
    want = lstm(torch.from_numpy(x))[0].detach().numpy()
    wi, wh = lstm.weight_ih_l0.detach().numpy(), lstm.weight_hh_l0.detach().numpy()
    bias = np.concatenate([lstm.bias_ih_l0.detach().numpy(), lstm.bias_hh_l0.detach().numpy()])
    reorder = lambda a: np.concatenate([a[0:4], a[12:16], a[4:8], a[8:12]])  # noqa: E731  torch i,f,g,o -> onnx i,o,f,c
    w, r = reorder(wi)[None], reorder(wh)[None]
    b = np.concatenate([reorder(bias[:16]), reorder(bias[16:])])[None]
    (y, _) = run_node_model("LSTM", {"x": x, "c_w": w, "c_r": r, "c_b": b}, 2, hidden_size=4)
    np.testing.assert_allclose(y[:, 0], want, rtol=1e-5, atol=1e-5)


# ----- export of our layers as ONNX recurrent nodes ------------------------------------------------
def _layer_cases():
    from singa import layer

    return [
        (layer.LSTM, {}),
        (layer.GRU, {"num_layers": 2}),
        (layer.RNN, {"nonlinearity": "relu", "bidirectional": True}),
        (layer.LSTM, {"num_layers": 2, "bidirectional": True, "batch_first": True}),
    ]


@pytest.mark.parametrize("case", range(4))
def test_recurrent_layers_export_as_onnx_recurrent_nodes(case):
    from sonnx_helpers import check_export, op_types, rand

    from singa import layer, tensor

    cls, kw = _layer_cases()[case]

    class Wrap(layer.Layer):
        def __init__(self):
            super().__init__()
            self.rnn = cls(3, 4, **kw)

        def forward(self, x):
            return list(self.rnn(x))

    w = Wrap()
    make = (lambda b: [rand((b, 5, 3))]) if kw.get("batch_first") else (lambda b: [rand((5, b, 3))])
    first = bool(kw.get("batch_first"))  # a dynamic batch is axis 0: batch-first inputs only
    model = check_export(w, make, batches=(3, 5) if first else (3,), dynamic_batch=first)
    kind = cls.__name__
    assert op_types(model).count(kind) == kw.get("num_layers", 1)
    assert "MatMul" not in op_types(model)  # not unrolled
    x = make(3)[0]
    back = sonnx.prepare(model).run([x])  # and our importer reads it back
    w.eval()
    want = [t.to_numpy() for t in w(tensor.from_numpy(x))]
    for g, wv in zip(back, want):
        np.testing.assert_allclose(g, wv, rtol=1e-5, atol=1e-6)


def test_list_input_keeps_the_unrolled_export():
    from singa import layer, tensor

    lstm = layer.LSTM(3, 2)

    class Wrap(layer.Layer):
        def __init__(self):
            super().__init__()
            self.rnn = lstm

        def forward(self, x):
            steps = [autograd.reshape(autograd.slice(x, [t], [t + 1], [0]), (-1, 3)) for t in range(2)]
            return self.rnn(steps)[0][-1]

    from singa import autograd

    model = sonnx.to_onnx([tensor.from_numpy(np.ones((2, 1, 3), np.float32))], Wrap(), dynamic_batch=False)
    assert "LSTM" not in [n.op_type for n in model.graph.node]
