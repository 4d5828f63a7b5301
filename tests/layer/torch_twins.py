"""Copy PyTorch's transformer weights into ours (test helper), and numpy twins of
multi-head attention that need no PyTorch."""

from __future__ import annotations

import numpy as np


def _set(t, arr) -> None:
    t.copy_from(np.ascontiguousarray(arr, dtype=t.dtype))


def _lin(ours, weight, bias) -> None:
    _set(ours.W, weight.T)
    if bias is not None:
        _set(ours.b, bias)


def copy_mha(ours, theirs) -> None:
    """torch.nn.MultiheadAttention -> layer.MultiHeadAttention."""
    e = ours.embed_dim
    sd = {k: v.detach().numpy() for k, v in theirs.state_dict().items()}
    b = sd.get("in_proj_bias")
    bs = [None] * 3 if b is None else [b[:e], b[e : 2 * e], b[2 * e :]]
    if "in_proj_weight" in sd:
        w = sd["in_proj_weight"]
        ws = [w[:e], w[e : 2 * e], w[2 * e :]]
    else:
        ws = [sd["q_proj_weight"], sd["k_proj_weight"], sd["v_proj_weight"]]
    for p, w, bb in zip((ours.q_proj, ours.k_proj, ours.v_proj), ws, bs):
        _lin(p, w, bb)
    _lin(ours.out_proj, sd["out_proj.weight"], sd.get("out_proj.bias"))


def _norm(ours, theirs) -> None:
    _set(ours.scale, theirs.weight.detach().numpy())
    _set(ours.bias, theirs.bias.detach().numpy())


def copy_block(ours, theirs) -> None:
    """A torch TransformerEncoderLayer/DecoderLayer -> ours (same sublayer names)."""
    copy_mha(ours.self_attn, theirs.self_attn)
    if hasattr(theirs, "multihead_attn"):
        copy_mha(ours.multihead_attn, theirs.multihead_attn)
    for name in ("linear1", "linear2"):
        t = getattr(theirs, name)
        _lin(
            getattr(ours, name),
            t.weight.detach().numpy(),
            None if t.bias is None else t.bias.detach().numpy(),
        )
    for name in ("norm1", "norm2", "norm3"):
        if hasattr(theirs, name):
            _norm(getattr(ours, name), getattr(theirs, name))


def mha_twin(mha, query, key, value, attn_mask=None, key_padding_mask=None, is_causal=False):
    """Multi-head attention in numpy with ``mha``'s weights (PyTorch's mask
    convention; rows with nothing to attend give 0). Returns (output, probabilities)."""
    h, d = mha.num_heads, mha.head_dim

    def proj(p, x):
        y = x @ p.W.to_numpy().astype(np.float64)
        return y + p.b.to_numpy() if p.b is not None else y

    def heads(x):
        b, t, _ = x.shape
        return x.reshape(b, t, h, d).transpose(0, 2, 1, 3)

    q, k, v = heads(proj(mha.q_proj, query)), heads(proj(mha.k_proj, key)), heads(proj(mha.v_proj, value))
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d)
    b, _, lq, ls = s.shape
    blocked = np.zeros(s.shape, bool)
    if attn_mask is not None:
        m = attn_mask.reshape(b, h, lq, ls) if attn_mask.ndim == 3 else attn_mask
        if m.dtype == bool:
            blocked |= np.broadcast_to(m, s.shape)
        else:
            s = s + m
    if key_padding_mask is not None:
        if key_padding_mask.dtype == bool:
            blocked |= key_padding_mask[:, None, None, :]
        else:
            s = s + key_padding_mask[:, None, None, :]
    if is_causal:
        blocked |= ~np.tril(np.ones((lq, ls), bool))
    blocked |= np.isneginf(s)
    s = np.where(blocked, -np.inf, s)
    m = np.where(blocked, -1e300, s).max(-1, keepdims=True)
    e = np.where(blocked, 0.0, np.exp(s - m))
    z = e.sum(-1, keepdims=True)
    p = e / np.where(z > 0, z, 1)
    y = (p @ v).transpose(0, 2, 1, 3).reshape(b, lq, h * d)
    return proj(mha.out_proj, y), p
