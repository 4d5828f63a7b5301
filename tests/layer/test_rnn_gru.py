"""GRU against a numpy reference and finite differences; CudnnRNN's API on our kernels."""

import numpy as np
import pytest
from layer_helpers import param_gradcheck

from singa import autograd, layer, tensor

RNG = np.random.default_rng(3)


def _sig(a):
    return 1 / (1 + np.exp(-a))


def _ref_gru(x, Wx, Wh, bx, bh, h):
    """Reference GRU over (seq, batch, in), one layer and direction."""
    H = Wh.shape[0]
    ys = []
    for x_t in x:
        xp, hp = x_t @ Wx + bx, h @ Wh + bh
        r = _sig(xp[:, :H] + hp[:, :H])
        z = _sig(xp[:, H : 2 * H] + hp[:, H : 2 * H])
        n = np.tanh(xp[:, 2 * H :] + r * hp[:, 2 * H :])
        h = (1 - z) * n + z * h
        ys.append(h)
    return np.stack(ys), h


def _params(g, k=0):
    return [p.to_numpy() for p in (g.Wx[k], g.Wh[k], g.Bx[k], g.Bh[k])]


def test_gru_matches_numpy_reference_with_and_without_h0():
    x = RNG.normal(size=(4, 2, 3))
    g = layer.GRU(3, 5)
    y, h = g(tensor.from_numpy(x.astype(np.float32)))
    ry, rh = _ref_gru(x, *_params(g), np.zeros((2, 5)))
    np.testing.assert_allclose(y.to_numpy(), ry, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(h.to_numpy(), rh[None], rtol=1e-4, atol=1e-5)
    h0 = RNG.normal(size=(1, 2, 5))
    y, _ = g(tensor.from_numpy(x.astype(np.float32)), tensor.from_numpy(h0.astype(np.float32)))
    np.testing.assert_allclose(y.to_numpy(), _ref_gru(x, *_params(g), h0[0])[0], rtol=1e-4, atol=1e-5)


def test_gru_bidirectional_two_layers_batch_first_shapes_and_reverse_direction():
    x = RNG.normal(size=(2, 4, 3)).astype(np.float32)  # batch first
    g = layer.GRU(3, 5, num_layers=2, batch_first=True, bidirectional=True)
    y, h = g(tensor.from_numpy(x))
    assert y.shape == (2, 4, 10) and h.shape == (4, 2, 5)
    seq = x.transpose(1, 0, 2).astype(np.float64)
    _, hb = _ref_gru(seq[::-1], *_params(g, 1), np.zeros((2, 5)))
    # the first layer's reverse direction ends at step 0: its h_n entry is index 1
    np.testing.assert_allclose(h.to_numpy()[1], hb, rtol=1e-4, atol=1e-5)


def test_gru_list_form_returns_lists_and_a_2d_state():
    steps = [tensor.from_numpy(RNG.normal(size=(2, 3)).astype(np.float32)) for _ in range(3)]
    ys, h = layer.GRU(3, 4)(steps)
    assert isinstance(ys, list) and len(ys) == 3 and h.shape == (2, 4)
    np.testing.assert_array_equal(ys[-1].to_numpy(), h.to_numpy())


def test_gru_rejects_bad_inputs():
    g = layer.GRU(3, 4)
    with pytest.raises(ValueError, match="input_size 3"):
        g(tensor.zeros((2, 2, 5)))
    with pytest.raises(ValueError, match="empty"):
        g([])
    with pytest.raises(ValueError, match="h0 must have shape"):
        g(tensor.zeros((2, 2, 3)), tensor.zeros((3, 2, 4)))


@pytest.mark.parametrize("cfg", [{}, {"bidirectional": True}, {"num_layers": 2}])
def test_gru_gradcheck(cfg):
    x = RNG.normal(size=(3, 2, 2))
    param_gradcheck(layer.GRU(2, 3, **cfg), [x])


def test_cudnn_rnn_modes_compute_with_the_matching_layer():
    x = RNG.normal(size=(2, 4, 3)).astype(np.float32)
    for mode, cls in [("lstm", layer.LSTM), ("gru", layer.GRU), ("vanilla", layer.RNN), ("relu", layer.RNN)]:
        rnn = layer.CudnnRNN(5, rnn_mode=mode)
        y = rnn(tensor.from_numpy(x))
        assert isinstance(rnn.rnn, cls) and y.shape == (2, 4, 5)
        ref = rnn.rnn(tensor.from_numpy(x.transpose(1, 0, 2)))[0].to_numpy().transpose(1, 0, 2)
        np.testing.assert_allclose(y.to_numpy(), ref, rtol=1e-6)
    assert layer.CudnnRNN(5, rnn_mode="relu")(tensor.from_numpy(x)).to_numpy().min() >= 0
    with pytest.raises(ValueError, match="rnn_mode"):
        layer.CudnnRNN(5, rnn_mode="transformer")


def test_cudnn_rnn_last_step_and_masks():
    x = RNG.normal(size=(3, 4, 2)).astype(np.float32)
    rnn = layer.CudnnRNN(5, rnn_mode="gru", return_sequences=False)
    last = rnn(tensor.from_numpy(x))
    full = rnn.rnn(tensor.from_numpy(x.transpose(1, 0, 2)))[0].to_numpy()
    np.testing.assert_allclose(last.to_numpy(), full[-1], rtol=1e-6)
    lengths = np.array([4, 1, 2], np.int32)
    masked = layer.CudnnRNN(5, rnn_mode="lstm", use_mask=True, return_sequences=False)
    out = masked(tensor.from_numpy(x), seq_lengths=tensor.from_numpy(lengths)).to_numpy()
    full = masked.rnn(tensor.from_numpy(x.transpose(1, 0, 2)))[0].to_numpy()
    np.testing.assert_allclose(out, full[lengths - 1, np.arange(3)], rtol=1e-6)
    seqs = layer.CudnnRNN(5, use_mask=True)
    ys = seqs(tensor.from_numpy(x), seq_lengths=lengths).to_numpy()
    assert (ys[1, 1:] == 0).all() and (ys[1, 0] != 0).all() and (ys[0] != 0).all()
    with pytest.raises(ValueError, match="seq_lengths"):
        seqs(tensor.from_numpy(x))
    with pytest.raises(ValueError, match="lengths in"):
        seqs(tensor.from_numpy(x), seq_lengths=np.array([5, 1, 1]))
    with pytest.raises(ValueError, match="single direction"):
        layer.CudnnRNN(5, use_mask=True, bidirectional=True)


def test_cudnn_rnn_trains_through_its_inner_parameters():
    x = tensor.from_numpy(RNG.normal(size=(2, 3, 2)))
    rnn = layer.CudnnRNN(4, rnn_mode="lstm", return_sequences=False, bidirectional=True)
    prev = autograd.training
    autograd.training = True
    try:
        y = rnn(x)
        assert y.shape == (2, 8)
        grads = dict(autograd.backward(autograd.sum(y)))
    finally:
        autograd.training = prev
    assert {id(p) for p in rnn.get_params().values()} == {id(p) for p in grads}
