"""RNN and LSTM against a numpy reference of the recurrence; layouts, states, gradients."""

import numpy as np
import pytest
from layer_helpers import param_gradcheck, t64

from singa import autograd, layer


def steps(x):
    """SINGA's list form of a (seq, batch, input) tensor: x[t] keeps its axis (size 1)."""
    return [autograd.squeeze(x[t], 0) for t in range(x.shape[0])]


def sig(z):
    return 1 / (1 + np.exp(-z))


def reference(lay, x, h0=None, c0=None):
    """numpy recurrence over x (T, B, I); returns y (T, B, D*H), h_n and c_n (L*D, B, H)."""
    p = {n: t.to_numpy() for n, t in lay.get_params().items()}
    hs, nd, lstm = lay.hidden_size, lay.num_directions, isinstance(lay, layer.LSTM)
    steps, batch = x.shape[:2]
    inp = x
    hn, cn = [], []
    for li in range(lay.num_layers):
        outs = []
        for d in range(nd):
            k = li * nd + d
            h = np.zeros((batch, hs)) if h0 is None else h0[k]
            c = np.zeros((batch, hs)) if c0 is None else c0[k]
            y = np.zeros((steps, batch, hs))
            for t in range(steps) if d == 0 else reversed(range(steps)):
                z = inp[t] @ p[f"Wx.{k}"] + h @ p[f"Wh.{k}"]
                if lay.bias:
                    z = z + (p[f"Bx.{k}"] + p[f"Bh.{k}"] if lstm else p[f"b.{k}"])
                if lstm:
                    i, f, o, g = np.split(z, 4, axis=1)
                    c = sig(f) * c + sig(i) * np.tanh(g)
                    h = sig(o) * np.tanh(c)
                else:
                    h = np.tanh(z) if lay.nonlinearity == "tanh" else np.maximum(z, 0)
                y[t] = h
            outs.append(y)
            hn.append(h)
            cn.append(c)
        inp = np.concatenate(outs, axis=2)
    return inp, np.stack(hn), np.stack(cn)


CONFIGS = [
    dict(num_layers=1),
    dict(num_layers=2),
    dict(num_layers=2, bidirectional=True),
    dict(num_layers=1, bias=False),
]


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("cls", [layer.RNN, layer.LSTM])
def test_forward_matches_numpy_recurrence(cls, cfg):
    lay = cls(3, 4, **cfg)
    x = np.random.default_rng(0).standard_normal((5, 2, 3))
    out = lay(t64(x))
    y_ref, h_ref, c_ref = reference(lay, x)
    nd = 2 if cfg.get("bidirectional") else 1
    assert out[0].shape == (5, 2, 4 * nd) and out[1].shape == (cfg["num_layers"] * nd, 2, 4)
    np.testing.assert_allclose(out[0].to_numpy(), y_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out[1].to_numpy(), h_ref, rtol=1e-10, atol=1e-12)
    if cls is layer.LSTM:
        assert len(out) == 3
        np.testing.assert_allclose(out[2].to_numpy(), c_ref, rtol=1e-10, atol=1e-12)
    else:
        assert len(out) == 2


def test_relu_rnn_and_given_initial_states():
    rnn = layer.RNN(3, 4, num_layers=2, nonlinearity="relu")
    x = np.random.default_rng(1).standard_normal((4, 2, 3))
    h0 = np.random.default_rng(2).standard_normal((2, 2, 4))
    y, h = rnn(t64(x), t64(h0))
    y_ref, h_ref, _ = reference(rnn, x, h0)
    np.testing.assert_allclose(y.to_numpy(), y_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(h.to_numpy(), h_ref, rtol=1e-10, atol=1e-12)
    lstm = layer.LSTM(3, 4)
    c0 = np.random.default_rng(3).standard_normal((1, 2, 4))
    y, h, c = lstm(t64(x), (t64(h0[:1]), t64(c0)))
    y_ref, h_ref, c_ref = reference(lstm, x, h0[:1], c0)
    np.testing.assert_allclose(c.to_numpy(), c_ref, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match=r"h0 must have shape \(2, 2, 4\)"):
        rnn(t64(x), t64(h0[:1]))


def test_batch_first_layout():
    lstm = layer.LSTM(3, 4, batch_first=True, num_layers=2)
    x = np.random.default_rng(4).standard_normal((2, 5, 3))  # (batch, seq, feature)
    y, h, c = lstm(t64(x))
    assert y.shape == (2, 5, 4) and h.shape == (2, 2, 4)
    y_ref, h_ref, _ = reference(lstm, x.transpose(1, 0, 2))
    np.testing.assert_allclose(y.to_numpy(), y_ref.transpose(1, 0, 2), rtol=1e-10, atol=1e-12)


def test_singa_list_form():
    rnn = layer.RNN(3, 4)
    x = np.random.default_rng(5).standard_normal((4, 2, 3))
    h0 = np.random.default_rng(6).standard_normal((2, 4))
    out, h = rnn([t64(s) for s in x], t64(h0))
    assert isinstance(out, list) and len(out) == 4 and h.shape == (2, 4)
    y_ref, h_ref, _ = reference(rnn, x, h0[None])
    np.testing.assert_allclose(np.stack([o.to_numpy() for o in out]), y_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(h.to_numpy(), h_ref[0], rtol=1e-10, atol=1e-12)
    lstm = layer.LSTM(3, 4)
    out, h, c = lstm([t64(s) for s in x], (t64(h0), t64(np.zeros((2, 4)))))
    assert len(out) == 4 and h.shape == c.shape == (2, 4)
    with pytest.raises(ValueError, match="every step"):
        rnn([t64(np.ones((2, 3))), t64(np.ones((3, 3)))])


@pytest.mark.parametrize("c0_shape", [(2, 1), (1, 4)])
def test_two_d_states_that_broadcast_to_batch_by_hidden(c0_shape):
    lstm = layer.LSTM(3, 4)
    x = np.random.default_rng(12).standard_normal((3, 2, 3))
    h0 = np.random.default_rng(13).standard_normal((2, 4))
    c0 = np.random.default_rng(14).standard_normal(c0_shape)
    out, h, c = lstm([t64(s) for s in x], (t64(h0), t64(c0)))
    assert h.shape == c.shape == (2, 4)
    _, h_ref, c_ref = reference(lstm, x, h0[None], np.broadcast_to(c0, (2, 4))[None])
    np.testing.assert_allclose(c.to_numpy(), c_ref[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(h.to_numpy(), h_ref[0], rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="c0 must have shape"):
        lstm([t64(s) for s in x], (t64(h0), t64(np.zeros((2, 3)))))


def test_one_sample_steps_broadcast_against_batch_states():
    # SINGA's char-rnn samples one character at a time with its (batch, H) training state:
    # every state row meets the same input step
    lstm = layer.LSTM(3, 4)
    x = np.random.default_rng(21).standard_normal((2, 1, 3))
    h0 = np.random.default_rng(22).standard_normal((5, 4))
    c0 = np.random.default_rng(23).standard_normal((5, 4))
    out, h, c = lstm([t64(s) for s in x], (t64(h0), t64(c0)))
    assert h.shape == c.shape == (5, 4) and out[-1].shape == (5, 4)
    _, h_ref, c_ref = reference(lstm, np.repeat(x, 5, axis=1), h0[None], c0[None])
    np.testing.assert_allclose(h.to_numpy(), h_ref[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(c.to_numpy(), c_ref[0], rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="h0 must have shape"):
        lstm([t64(np.ones((2, 3)))], (t64(h0), t64(c0)))


def test_gradcheck_broadcast_initial_state():
    x = np.random.default_rng(15).standard_normal((3, 2, 2))
    h0 = np.random.default_rng(16).standard_normal((2, 3))
    c0 = np.random.default_rng(17).standard_normal((2, 1))
    param_gradcheck(layer.LSTM(2, 3), [x, h0, c0], call=lambda lay, x, h, c: lay(steps(x), (h, c)))


def test_param_names_shapes_and_init():
    lstm = layer.LSTM(3, 5, num_layers=2, bidirectional=True)
    p = lstm.get_params()
    assert list(p)[:4] == ["Wx.0", "Wx.1", "Wx.2", "Wx.3"]
    assert p["Wx.0"].shape == (3, 20) and p["Wx.2"].shape == (10, 20)
    assert p["Wh.3"].shape == (5, 20) and p["Bx.0"].shape == (20,) and p["Bh.3"].shape == (20,)
    assert len(p) == 16 and all(t.stores_grad for t in p.values())
    assert max(np.abs(t.to_numpy()).max() for t in p.values()) <= 1 / np.sqrt(5)
    rnn = layer.RNN(3, 5, bias=False)
    assert list(rnn.get_params()) == ["Wx.0", "Wh.0"]
    with pytest.raises(ValueError, match="nonlinearity"):
        layer.RNN(3, 5, nonlinearity="sigmoid")


def test_params_adopt_first_input_dtype():
    lstm = layer.LSTM(2, 3)
    assert lstm.Wx[0].dtype == np.float32
    lstm(t64(np.ones((2, 1, 2))))
    assert all(t.dtype == np.float64 for t in lstm.get_params().values())


def test_dropout_between_layers_follows_mode():
    rnn = layer.RNN(3, 4, num_layers=2, dropout=0.5)
    x = t64(np.random.default_rng(7).standard_normal((3, 2, 3)))
    rnn.eval()
    y1, y2 = rnn(x)[0].to_numpy(), rnn(x)[0].to_numpy()
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_allclose(y1, reference(rnn, x.to_numpy())[0], rtol=1e-10, atol=1e-12)
    rnn.train()
    assert not np.allclose(rnn(x)[0].to_numpy(), y1)


@pytest.mark.parametrize("cfg", [dict(num_layers=1), dict(num_layers=2, bidirectional=True)])
@pytest.mark.parametrize("cls", [layer.RNN, layer.LSTM])
def test_gradcheck_through_params_and_input(cls, cfg):
    x = np.random.default_rng(8).standard_normal((3, 2, 2))
    param_gradcheck(cls(2, 3, **cfg), [x])


def test_gradcheck_initial_states():
    x = np.random.default_rng(9).standard_normal((3, 2, 2))
    h0 = np.random.default_rng(10).standard_normal((1, 2, 3))
    c0 = np.random.default_rng(11).standard_normal((1, 2, 3))
    param_gradcheck(layer.LSTM(2, 3), [x, h0, c0], call=lambda lay, x, h, c: lay(x, (h, c)))
    param_gradcheck(layer.RNN(2, 3), [x, h0[0]], call=lambda lay, x, h: lay(steps(x), h))
