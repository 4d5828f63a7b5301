"""Multi-head attention as a layer, with PyTorch's ``nn.MultiheadAttention`` arguments
(batch-first).

The four projections are plain :class:`~singa.layer.Linear` layers named ``q_proj``,
``k_proj``, ``v_proj`` and ``out_proj`` (``W`` of shape (in, out), as every Linear
here: PyTorch's ``in_proj_weight[:E]`` transposed is ``q_proj.W``), so adapters such
as LoRA can wrap or replace them. The attention itself is
:func:`singa.autograd.scaled_dot_product_attention`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from singa import autograd
from singa.layer.base import Layer
from singa.layer.linear import Linear
from singa.tensor import Tensor

__all__ = ["MultiHeadAttention", "merge_masks"]


def _constant(value: Any, like: Tensor) -> Tensor:
    """A constant (no gradient) on ``like``'s device."""
    xp = like.device.xp
    return Tensor.wrap(xp.asarray(value), like.device)


def _as_bias(mask: Tensor, dtype: Any) -> Tensor:
    """A layer-convention mask as an additive float bias: a boolean (True = masked)
    becomes -inf there, 0 elsewhere; a float mask is returned as it is."""
    if mask.data.dtype.kind != "b":
        return mask
    zero, neg = _constant(np.zeros(1, dtype), mask), _constant(np.full(1, -np.inf, dtype), mask)
    return autograd.where(neg, zero, mask)


def merge_masks(
    attn_mask: Tensor | None, key_padding_mask: Tensor | None, batch: int, heads: int, dtype: Any
) -> Tensor | None:
    """One mask for :func:`~singa.autograd.scaled_dot_product_attention` from the
    layer's masks (PyTorch's convention: boolean True = may NOT attend, float added):
    ``attn_mask`` (L, S) or (batch * heads, L, S) and ``key_padding_mask`` (batch, S).
    Both boolean: a boolean "may attend" mask; otherwise an additive float one. The
    result broadcasts to (batch, heads, L, S)."""
    masks = []
    if attn_mask is not None:
        m = attn_mask
        if m.ndim() == 3:
            m = autograd.reshape(m, (batch, heads) + tuple(m.shape[1:]))
        masks.append(m)
    if key_padding_mask is not None:
        masks.append(autograd.reshape(key_padding_mask, (batch, 1, 1, key_padding_mask.shape[-1])))
    if not masks:
        return None
    if all(m.data.dtype.kind == "b" for m in masks):
        allowed = autograd._not(masks[0])
        for m in masks[1:]:
            allowed = autograd._and(allowed, autograd._not(m))
        return allowed
    bias = _as_bias(masks[0], dtype)
    for m in masks[1:]:
        bias = autograd.add(bias, _as_bias(m, dtype))
    return bias


def _check_mask(name: str, m: Tensor | None, shapes: tuple, dtype: Any) -> None:
    if m is None:
        return
    if tuple(m.shape) not in shapes:
        raise ValueError(f"MultiHeadAttention: {name} of shape {m.shape} should be one of {list(shapes)}")
    kind = m.data.dtype.kind
    if kind != "b" and m.dtype != dtype:
        raise ValueError(
            f"MultiHeadAttention: {name} must be boolean or of the query's dtype {dtype}, got {m.dtype}"
        )


class MultiHeadAttention(Layer):
    """Multi-head attention (PyTorch's ``nn.MultiheadAttention`` with
    ``batch_first=True``): ``out_proj(attention(q_proj(query), k_proj(key),
    v_proj(value)))`` over ``num_heads`` heads of size ``embed_dim // num_heads``.

    Args:
        embed_dim: the model width E (query features; the output's width).
        num_heads: the number of heads (must divide E).
        dropout: dropout on the attention probabilities while training.
        bias: biases in the four projections.
        kdim, vdim: the key and value features (default E): cross-attention inputs.

    Parameters as PyTorch initialises them: the input projections Xavier-uniform (over
    the stacked (3E, E) matrix when kdim == vdim == E, else each alone), their biases 0;
    ``out_proj`` a default Linear with bias 0.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        kdim: int | None = None,
        vdim: int | None = None,
        name: str | None = None,
    ):
        super().__init__(name)
        if embed_dim <= 0 or num_heads <= 0 or embed_dim % num_heads:
            raise ValueError(
                f"MultiHeadAttention: embed_dim ({embed_dim}) must be a positive multiple of "
                f"num_heads ({num_heads})"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"MultiHeadAttention: dropout must be in [0, 1), got {dropout}")
        self.embed_dim, self.num_heads = int(embed_dim), int(num_heads)
        self.head_dim = self.embed_dim // self.num_heads
        self.kdim = int(kdim) if kdim is not None else self.embed_dim
        self.vdim = int(vdim) if vdim is not None else self.embed_dim
        self.dropout = float(dropout)
        self.q_proj = Linear(self.embed_dim, self.embed_dim, bias)
        self.k_proj = Linear(self.kdim, self.embed_dim, bias)
        self.v_proj = Linear(self.vdim, self.embed_dim, bias)
        self.out_proj = Linear(self.embed_dim, self.embed_dim, bias)
        self._reset_parameters(bias)

    def _reset_parameters(self, bias: bool) -> None:
        e = self.embed_dim
        stacked = self.kdim == e and self.vdim == e
        for p, fan_in in ((self.q_proj, e), (self.k_proj, self.kdim), (self.v_proj, self.vdim)):
            bound = math.sqrt(6.0 / (e + 3 * e)) if stacked else math.sqrt(6.0 / (fan_in + e))
            assert p.W is not None  # Linear(in, out) creates W now
            p.W.uniform(-bound, bound)
        if bias:
            for p in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
                assert p.b is not None
                p.b.set_value(0.0)

    def _heads(self, x: Tensor) -> Tensor:
        """(B, T, E) -> (B, H, T, D)."""
        b, t, _ = x.shape
        return autograd.transpose(autograd.reshape(x, (b, t, self.num_heads, self.head_dim)), (0, 2, 1, 3))

    def _packable(self) -> bool:
        """Whether self-attention may take q, k and v from one product: the three
        projections are plain Linear layers past their first call (which adopts the
        input's device and dtype and runs any load hook), none wrapped (an adapter, or
        :func:`singa.model.summary`'s per-call record)."""
        projections = (self.q_proj, self.k_proj, self.v_proj)
        return all(
            type(p) is Linear and p.initialized and "forward" not in vars(p) and p.bias == self.q_proj.bias
            for p in projections
        )

    def _packed_projections(self, x: Tensor) -> tuple:
        """``q_proj(x), k_proj(x), v_proj(x)`` as one product with the weights side by
        side (PyTorch's ``in_proj_weight``): one (B*L, E) @ (E, 3E) product and one bias
        add instead of three of each, and the input's gradient from one product instead
        of three and their sum. The outputs are column slices of one array."""
        projections = (self.q_proj, self.k_proj, self.v_proj)
        y = autograd.matmul(x, autograd.cat([p.W for p in projections], 1))
        if self.q_proj.bias:
            y = autograd.add(y, autograd.cat([p.b for p in projections], 0))
        return autograd.split(y, y.ndim() - 1, [self.embed_dim] * 3)

    def _check(self, query: Tensor, key: Tensor, value: Tensor) -> None:
        if query.ndim() != 3 or key.ndim() != 3 or value.ndim() != 3:
            raise ValueError(
                "MultiHeadAttention: query, key and value must be (batch, length, features), got shapes "
                f"{query.shape}, {key.shape}, {value.shape}"
            )
        dims = (query.shape[-1], key.shape[-1], value.shape[-1])
        if dims != (self.embed_dim, self.kdim, self.vdim):
            raise ValueError(
                f"MultiHeadAttention: feature sizes {dims} should be (embed_dim, kdim, vdim) = "
                f"{(self.embed_dim, self.kdim, self.vdim)}"
            )
        if query.shape[0] != key.shape[0] or key.shape[:2] != value.shape[:2]:
            raise ValueError(
                f"MultiHeadAttention: batch or length of query {query.shape}, key {key.shape} and value "
                f"{value.shape} do not agree"
            )

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        attn_mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = False,
        is_causal: bool = False,
        average_attn_weights: bool = True,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend ``query`` (B, L, E) to ``key`` (B, S, kdim) / ``value`` (B, S, vdim)
        (both default to ``query``: self-attention; 2-D inputs are one unbatched sample).

        ``attn_mask`` (L, S) or (B * num_heads, L, S) and ``key_padding_mask`` (B, S)
        follow PyTorch: boolean True marks what may NOT be attended, a float mask is
        added to the scores. ``is_causal=True`` applies the causal mask (alone or with
        the masks). Returns ``(output (B, L, E), weights)``; weights are the attention
        probabilities when ``need_weights`` (averaged over heads, (B, L, S), unless
        ``average_attn_weights=False``: (B, H, L, S)), else None. A query with every key
        masked gives 0 (PyTorch gives NaN).
        """
        key = query if key is None else key
        value = key if value is None else value
        if query.ndim() == 2:  # unbatched
            q1, k1, v1 = (autograd.unsqueeze(t, [0]) for t in (query, key, value))
            out, w = self.forward(
                q1,
                k1,
                v1,
                attn_mask,
                None if key_padding_mask is None else autograd.unsqueeze(key_padding_mask, [0]),
                need_weights,
                is_causal,
                average_attn_weights,
            )
            return autograd.squeeze(out, [0]), None if w is None else autograd.squeeze(w, [0])
        self._check(query, key, value)
        b, q_len, s_len = query.shape[0], query.shape[1], key.shape[1]
        _check_mask("attn_mask", attn_mask, ((q_len, s_len), (b * self.num_heads, q_len, s_len)), query.dtype)
        _check_mask("key_padding_mask", key_padding_mask, ((b, s_len),), query.dtype)
        if key is query and value is query and self._packable():
            q, k, v = (self._heads(t) for t in self._packed_projections(query))
        else:
            q = self._heads(self.q_proj(query))
            k = self._heads(self.k_proj(key))
            v = self._heads(self.v_proj(value))
        mask = merge_masks(attn_mask, key_padding_mask, b, self.num_heads, query.dtype)
        p_drop = self.dropout if self.training else 0.0
        if need_weights:
            y, w = self._explicit(q, k, v, mask, p_drop, is_causal)
            if average_attn_weights:
                w = autograd.reduce_mean(w, [1], keepdims=0)
        else:
            y, w = autograd.scaled_dot_product_attention(q, k, v, mask, p_drop, is_causal), None
        y = autograd.reshape(autograd.transpose(y, (0, 2, 1, 3)), (b, q_len, self.embed_dim))
        return self.out_proj(y), w

    def _explicit(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, p_drop: float, causal: bool
    ) -> tuple:
        """Attention with the probabilities as a tensor (for ``need_weights``)."""
        s = autograd.matmul(q, autograd.transpose(k, (0, 1, 3, 2)))
        s = autograd.mul(s, _constant(np.asarray(1.0 / math.sqrt(self.head_dim), q.dtype), q))
        allowed = None
        if mask is not None and mask.data.dtype.kind == "b":
            allowed = mask
        elif mask is not None:
            s = autograd.add(s, mask)
        if causal:
            tril = _constant(np.tril(np.ones(s.shape[-2:], bool)), q)
            allowed = tril if allowed is None else autograd._and(allowed, tril)
        w = autograd.masked_softmax(s, allowed, -1)
        wd = autograd.dropout(w, p_drop, training=p_drop > 0) if p_drop > 0 else w
        return autograd.matmul(wd, v), w

    def __repr__(self) -> str:
        return (
            f"MultiHeadAttention(embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
            f"dropout={self.dropout}, "
            f"kdim={self.kdim}, vdim={self.vdim})"
        )
