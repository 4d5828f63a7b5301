"""MultiHeadAttention and the Transformer blocks: a numpy twin (no PyTorch needed),
float64 gradient checks, and equality with PyTorch (forward rtol 1e-5, gradients 1e-4,
float32) with the weights copied in, over masks, padding, causal, norm_first and
cross-attention."""

import numpy as np
import pytest
from torch_twins import copy_block, copy_mha, mha_twin

from singa import autograd, layer
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor

rng = np.random.default_rng(0)


def t(a, grad=False):
    a = np.asarray(a)
    return Tensor(data=a.copy(), dtype=a.dtype, requires_grad=grad, stores_grad=grad)


def mha64(e=8, h=2, **kw):
    m = layer.MultiHeadAttention(e, h, **kw)
    m.eval()
    return m


MASKS = {
    "none": lambda b, lq, ls, h: {},
    "bool_attn": lambda b, lq, ls, h: {"attn_mask": ~np.tril(np.ones((lq, ls), bool))},
    "float_attn_per_head": lambda b, lq, ls, h: {"attn_mask": rng.standard_normal((b * h, lq, ls))},
    "padding": lambda b, lq, ls, h: {
        "key_padding_mask": np.arange(ls)[None, :] >= np.array([[ls], [ls - 2]])
    },
    "float_padding_and_bool": lambda b, lq, ls, h: {
        "key_padding_mask": np.where(np.arange(ls)[None, :] >= np.array([[ls], [ls - 1]]), -np.inf, 0.0),
        "attn_mask": rng.random((lq, ls)) > 0.8,
    },
    "causal": lambda b, lq, ls, h: {"is_causal": True},
}


def _ours(kw, dtype):
    out = {}
    for k, v in kw.items():
        out[k] = v if isinstance(v, bool) else t(v.astype(dtype) if v.dtype != bool else v)
    return out


@pytest.mark.parametrize("case", list(MASKS))
def test_mha_matches_numpy_twin(case):
    m = mha64()
    x = rng.standard_normal((2, 5, 8))
    kw = MASKS[case](2, 5, 5, 2)
    y, w = m(t(x), t(x), t(x), need_weights=True, average_attn_weights=False, **_ours(kw, np.float64))
    want, p = mha_twin(m, x, x, x, **kw)
    np.testing.assert_allclose(y.to_numpy(), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w.to_numpy(), p, rtol=1e-10, atol=1e-12)
    y2, none = m(t(x), t(x), t(x), **_ours(kw, np.float64))  # the fused path gives the same
    assert none is None
    np.testing.assert_allclose(y2.to_numpy(), want, rtol=1e-10, atol=1e-12)


def test_cross_attention_with_kdim_vdim_matches_twin():
    m = mha64(kdim=3, vdim=5)
    q, k, v = rng.standard_normal((2, 4, 8)), rng.standard_normal((2, 6, 3)), rng.standard_normal((2, 6, 5))
    kpm = np.zeros((2, 6), bool)
    kpm[1, 4:] = True
    y, w = m(t(q), t(k), t(v), key_padding_mask=t(kpm), need_weights=True)
    want, p = mha_twin(m, q, k, v, key_padding_mask=kpm)
    np.testing.assert_allclose(y.to_numpy(), want, rtol=1e-10)
    np.testing.assert_allclose(w.to_numpy(), p.mean(1), rtol=1e-10)
    assert [n for n in m.get_params()] == [
        "q_proj.W", "q_proj.b", "k_proj.W", "k_proj.b", "v_proj.W", "v_proj.b", "out_proj.W", "out_proj.b"
    ]  # fmt: skip


def test_unbatched_input_is_one_sample():
    m = mha64()
    x = rng.standard_normal((5, 8))
    y, _ = m(t(x), is_causal=True)
    want, _ = mha_twin(m, x[None], x[None], x[None], is_causal=True)
    np.testing.assert_allclose(y.to_numpy(), want[0], rtol=1e-10)


def test_mha_gradcheck_float64():
    m = mha64(e=4, h=2)
    x, mem = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 4))
    kpm = np.array([[False] * 4, [False, False, True, True]])
    gradcheck(lambda a, b, p: m(a, b, b, key_padding_mask=p)[0], [x, mem, kpm])
    gradcheck(lambda a: m(a, is_causal=True)[0], [x])


def test_encoder_layer_gradcheck_float64():
    enc = layer.TransformerEncoderLayer(
        4, 2, dim_feedforward=6, dropout=0.0, activation="gelu", norm_first=True
    )
    x = rng.standard_normal((2, 3, 4))
    gradcheck(lambda a: enc(a, is_causal=True), [x])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"embed_dim": 6, "num_heads": 4}, "multiple of num_heads"),
        ({"dropout": 1.0}, "dropout"),
    ],
)
def test_mha_constructor_errors(kwargs, match):
    args = {"embed_dim": 8, "num_heads": 2} | kwargs
    with pytest.raises(ValueError, match=match):
        layer.MultiHeadAttention(**args)


def test_mha_call_errors():
    m = mha64()
    x = t(rng.standard_normal((2, 5, 8)))
    with pytest.raises(ValueError, match="feature sizes"):
        m(t(rng.standard_normal((2, 5, 7))))
    with pytest.raises(ValueError, match="attn_mask of shape"):
        m(x, attn_mask=t(np.ones((4, 5), bool)))
    with pytest.raises(ValueError, match="key_padding_mask of shape"):
        m(x, key_padding_mask=t(np.ones((2, 4), bool)))
    with pytest.raises(ValueError, match="dtype"):
        m(x, key_padding_mask=t(np.ones((2, 5), np.int64)))
    with pytest.raises(ValueError, match="activation"):
        layer.TransformerEncoderLayer(8, 2, activation="swish")


def test_encoder_stack_copies_start_equal_and_train_apart():
    enc = layer.TransformerEncoder(
        layer.TransformerEncoderLayer(8, 2, 16, dropout=0.0), 3, norm=layer.LayerNorm(8)
    )
    names = list(enc.get_params())
    assert "layers.2.self_attn.q_proj.W" in names and "norm.scale" in names
    w0, w2 = enc.layers[0].linear1.W, enc.layers[2].linear1.W
    np.testing.assert_array_equal(w0.to_numpy(), w2.to_numpy())
    assert w0.data is not w2.data and w0.device is w2.device


# ----- PyTorch ---------------------------------------------------------------------------
def _torch():
    try:
        import torch
    except Exception:
        pytest.skip("torch is not importable")
    torch.manual_seed(0)
    return torch


def _torch_masks(torch, kw):
    return {
        k: (v if isinstance(v, bool) else torch.from_numpy(v.astype(np.float32) if v.dtype != bool else v))
        for k, v in kw.items()
    }


def _compare_grads(torch_params, ours, names, rtol=1e-4, atol=1e-5):
    for name, tp in torch_params:
        g = ours[names(name)]
        np.testing.assert_allclose(g, tp.grad.numpy(), rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.parametrize("case", [c for c in MASKS if c != "float_padding_and_bool"])
def test_mha_equals_torch(case):
    torch = _torch()
    tm = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    m = layer.MultiHeadAttention(8, 2)
    copy_mha(m, tm)
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    kw = MASKS[case](2, 5, 5, 2)
    if case == "causal":  # PyTorch needs the mask with is_causal; ours applies it alone
        tkw = {"attn_mask": torch.nn.Transformer.generate_square_subsequent_mask(5), "is_causal": True}
    else:
        tkw = _torch_masks(torch, kw)
    tx = torch.from_numpy(x).requires_grad_()
    ty, _ = tm(tx, tx, tx, need_weights=False, **tkw)
    ty.backward(torch.from_numpy(np.linspace(-1, 1, ty.numel()).reshape(ty.shape).astype(np.float32)))
    xs = t(x, grad=True)
    autograd.training = True
    try:
        y, _ = m(xs, xs, xs, **_ours(kw, np.float32))
        grads = autograd.gradients(y, dy=np.linspace(-1, 1, y.size()).reshape(y.shape).astype(np.float32))
    finally:
        autograd.training = False
    np.testing.assert_allclose(y.to_numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grads[xs].to_numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    w_in = tm.in_proj_weight.grad.numpy()
    np.testing.assert_allclose(grads[m.k_proj.W].to_numpy(), w_in[8:16].T, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        grads[m.out_proj.b].to_numpy(), tm.out_proj.bias.grad.numpy(), rtol=1e-4, atol=1e-5
    )


def test_mha_need_weights_equals_torch():
    torch = _torch()
    tm = torch.nn.MultiheadAttention(8, 2, batch_first=True, kdim=3, vdim=5)
    m = layer.MultiHeadAttention(8, 2, kdim=3, vdim=5)
    copy_mha(m, tm)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 4, 8), (2, 6, 3), (2, 6, 5)))
    kpm = np.zeros((2, 6), bool)
    kpm[0, 5] = True
    ty, tw = tm(*map(torch.from_numpy, (q, k, v)), key_padding_mask=torch.from_numpy(kpm), need_weights=True)
    y, w = m(t(q), t(k), t(v), key_padding_mask=t(kpm), need_weights=True)
    np.testing.assert_allclose(y.to_numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.to_numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)


def _block_pair(torch, decoder, norm_first, activation):
    cls = torch.nn.TransformerDecoderLayer if decoder else torch.nn.TransformerEncoderLayer
    theirs = cls(8, 2, 16, dropout=0.0, activation=activation, norm_first=norm_first, batch_first=True)
    ours_cls = layer.TransformerDecoderLayer if decoder else layer.TransformerEncoderLayer
    ours = ours_cls(8, 2, 16, dropout=0.0, activation=activation, norm_first=norm_first)
    copy_block(ours, theirs)
    return ours, theirs


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_equals_torch(norm_first, activation):
    torch = _torch()
    ours, theirs = _block_pair(torch, False, norm_first, activation)
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    kpm = np.zeros((2, 5), bool)
    kpm[1, 3:] = True
    tx = torch.from_numpy(x).requires_grad_()
    ty = theirs(tx, src_key_padding_mask=torch.from_numpy(kpm))
    dy = np.cos(np.arange(ty.numel())).reshape(ty.shape).astype(np.float32)
    ty.backward(torch.from_numpy(dy))
    xs = t(x, grad=True)
    autograd.training = True
    try:
        y = ours(xs, src_key_padding_mask=t(kpm))
        g = autograd.gradients(y, dy=dy)
    finally:
        autograd.training = False
    np.testing.assert_allclose(y.to_numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g[xs].to_numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        g[ours.linear1.W].to_numpy(), theirs.linear1.weight.grad.numpy().T, rtol=1e-4, atol=1e-5
    )
    np.testing.assert_allclose(
        g[ours.norm2.scale].to_numpy(), theirs.norm2.weight.grad.numpy(), rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_stack_equals_torch(norm_first):
    torch = _torch()
    ours_l, theirs_l = _block_pair(torch, True, norm_first, "gelu")
    theirs = torch.nn.TransformerDecoder(theirs_l, 2, norm=torch.nn.LayerNorm(8))
    ours = layer.TransformerDecoder(ours_l, 2, norm=layer.LayerNorm(8))
    for a, b in zip(ours.layers, theirs.layers):
        copy_block(a, b)
    tgt, mem = (
        rng.standard_normal((2, 4, 8)).astype(np.float32),
        rng.standard_normal((2, 6, 8)).astype(np.float32),
    )
    mkpm = np.zeros((2, 6), bool)
    mkpm[0, 4:] = True
    causal = torch.nn.Transformer.generate_square_subsequent_mask(4)
    tt, tm_ = torch.from_numpy(tgt).requires_grad_(), torch.from_numpy(mem).requires_grad_()
    ty = theirs(tt, tm_, tgt_mask=causal, tgt_is_causal=True, memory_key_padding_mask=torch.from_numpy(mkpm))
    ty.sum().backward()
    ts, ms = t(tgt, grad=True), t(mem, grad=True)
    autograd.training = True
    try:
        y = ours(ts, ms, memory_key_padding_mask=t(mkpm), tgt_is_causal=True)
        g = autograd.gradients(y, dy=np.ones(y.shape, np.float32))
    finally:
        autograd.training = False
    np.testing.assert_allclose(y.to_numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g[ts].to_numpy(), tt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(g[ms].to_numpy(), tm_.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_self_attention_packs_the_three_projections_after_the_first_call():
    """Self-attention past the first call takes q, k and v from one product with the
    weights side by side; outputs and every gradient equal the three products'."""
    m = layer.MultiHeadAttention(8, 2)
    x = rng.standard_normal((2, 5, 8))
    assert not m._packable()  # the first call adopts the input's dtype and runs load hooks
    m(t(x), is_causal=True)
    assert m._packable()
    autograd.training = True
    try:
        results = []
        for same in (True, False):
            q = t(x, grad=True)
            k, v = (q, q) if same else (t(x, grad=True), t(x, grad=True))
            y, _ = m(q, k, v, is_causal=True)
            grads = dict(autograd.backward(autograd.reduce_sum(autograd.mul(y, t(x)))))
            dx = grads[q] if same else grads[q] + grads[k] + grads[v]
            ws = [grads[p.W] for p in (m.q_proj, m.k_proj, m.v_proj)]
            bs = [grads[p.b] for p in (m.q_proj, m.k_proj, m.v_proj)]
            results.append((y.to_numpy(), dx.to_numpy(), [g.to_numpy() for g in ws + bs]))
    finally:
        autograd.training = False
    (y1, dx1, g1), (y2, dx2, g2) = results
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_allclose(dx1, dx2, rtol=1e-12, atol=1e-12)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_wrapped_projection_is_not_packed():
    """A projection wrapped by an adapter keeps its own call."""
    from singa.peft.layers import LinearLoRALayer

    m = layer.MultiHeadAttention(8, 2)
    m(t(rng.standard_normal((2, 5, 8))))
    assert m._packable()
    m.k_proj = LinearLoRALayer(m.k_proj, r=2)
    assert not m._packable()
