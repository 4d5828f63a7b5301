"""Transformer blocks with PyTorch's arguments (``nn.TransformerEncoderLayer``,
``nn.TransformerDecoderLayer``, ``nn.TransformerEncoder``, ``nn.TransformerDecoder``),
batch-first.

Sublayer names follow PyTorch's (``self_attn``, ``multihead_attn``, ``linear1``,
``linear2``, ``norm1``..``norm3``), so a state dict maps over name by name (the
attention's packed ``in_proj_weight`` splits into ``q_proj``/``k_proj``/``v_proj``, and
each Linear's ``W`` is PyTorch's ``weight`` transposed).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from singa import autograd
from singa import device as _device
from singa.layer.attention import MultiHeadAttention
from singa.layer.base import Layer
from singa.layer.linear import Linear
from singa.layer.norm import Dropout, LayerNorm
from singa.tensor import Tensor

__all__ = ["TransformerEncoderLayer", "TransformerDecoderLayer", "TransformerEncoder", "TransformerDecoder"]


def _activation(activation: str | Callable) -> Callable:
    if callable(activation):
        return activation
    if activation == "relu":
        return autograd.relu
    if activation == "gelu":
        return autograd.gelu
    raise ValueError(f"activation must be 'relu', 'gelu' or a callable, got {activation!r}")


def _check_common(d_model: int, nhead: int, dropout: float) -> None:
    if d_model <= 0 or nhead <= 0 or d_model % nhead:
        raise ValueError(f"d_model ({d_model}) must be a positive multiple of nhead ({nhead})")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")


class _TransformerBlock(Layer):
    """What both transformer layers hold, under PyTorch's attribute names: ``self_attn``
    (and ``multihead_attn`` for cross-attention), the feed-forward block ``linear1``,
    ``dropout``, ``linear2``, ``activation``, and a LayerNorm ``norm<i>`` and a Dropout
    ``dropout<i>`` per residual branch."""

    def _build(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int,
        dropout: float,
        activation: str | Callable,
        layer_norm_eps: float,
        norm_first: bool,
        bias: bool,
        cross_attention: bool,
    ) -> None:
        _check_common(d_model, nhead, dropout)
        act = _activation(activation)
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias)
        if cross_attention:
            self.multihead_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias)
        self.linear1 = Linear(d_model, dim_feedforward, bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias)
        self.activation = act
        branches = 3 if cross_attention else 2
        norms = [LayerNorm(d_model, eps=layer_norm_eps) for _ in range(branches)]
        drops = [Dropout(dropout) for _ in range(branches)]
        self.norm1, self.norm2 = norms[0], norms[1]
        if cross_attention:
            self.norm3 = norms[2]
        self.dropout1, self.dropout2 = drops[0], drops[1]
        if cross_attention:
            self.dropout3 = drops[2]
        self._ff_dropout = drops[-1]
        self.norm_first = bool(norm_first)

    def _ff(self, x: Tensor) -> Tensor:
        return self._ff_dropout(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerEncoderLayer(_TransformerBlock):
    """Self-attention then a feed-forward block, each with a residual connection and
    LayerNorm: post-norm ``x = norm1(x + sa(x)); x = norm2(x + ff(x))`` or, with
    ``norm_first``, pre-norm ``x = x + sa(norm1(x)); x = x + ff(norm2(x))``.

    Arguments and defaults are PyTorch's (``activation`` "relu", "gelu" or a function
    of a Tensor); inputs are (batch, length, d_model).
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable = "relu",
        layer_norm_eps: float = 1e-5,
        norm_first: bool = False,
        bias: bool = True,
        name: str | None = None,
    ):
        super().__init__(name)
        self._build(
            d_model,
            nhead,
            dim_feedforward,
            dropout,
            activation,
            layer_norm_eps,
            norm_first,
            bias,
            cross_attention=False,
        )

    def _sa(self, x: Tensor, mask: Any, kpm: Any, causal: bool) -> Tensor:
        y, _ = self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=kpm, is_causal=causal)
        return self.dropout1(y)

    def forward(
        self,
        src: Tensor,
        src_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        """The encoded sequence (batch, length, d_model); masks as
        :class:`MultiHeadAttention`'s."""
        x = src
        if self.norm_first:
            x = autograd.add(x, self._sa(self.norm1(x), src_mask, src_key_padding_mask, is_causal))
            return autograd.add(x, self._ff(self.norm2(x)))
        x = self.norm1(autograd.add(x, self._sa(x, src_mask, src_key_padding_mask, is_causal)))
        return self.norm2(autograd.add(x, self._ff(x)))


class TransformerDecoderLayer(_TransformerBlock):
    """Self-attention, cross-attention over ``memory``, then a feed-forward block,
    each with a residual connection and LayerNorm (post-norm, or pre-norm with
    ``norm_first``), PyTorch's arguments and defaults."""

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable = "relu",
        layer_norm_eps: float = 1e-5,
        norm_first: bool = False,
        bias: bool = True,
        name: str | None = None,
    ):
        super().__init__(name)
        self._build(
            d_model,
            nhead,
            dim_feedforward,
            dropout,
            activation,
            layer_norm_eps,
            norm_first,
            bias,
            cross_attention=True,
        )

    def _sa(self, x: Tensor, mask: Any, kpm: Any, causal: bool) -> Tensor:
        return self.dropout1(
            self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=kpm, is_causal=causal)[0]
        )

    def _mha(self, x: Tensor, mem: Tensor, mask: Any, kpm: Any, causal: bool) -> Tensor:
        y = self.multihead_attn(x, mem, mem, attn_mask=mask, key_padding_mask=kpm, is_causal=causal)[0]
        return self.dropout2(y)

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ) -> Tensor:
        """The decoded sequence (batch, target length, d_model)."""
        x = tgt
        sa = (tgt_mask, tgt_key_padding_mask, tgt_is_causal)
        ca = (memory_mask, memory_key_padding_mask, memory_is_causal)
        if self.norm_first:
            x = autograd.add(x, self._sa(self.norm1(x), *sa))
            x = autograd.add(x, self._mha(self.norm2(x), memory, *ca))
            return autograd.add(x, self._ff(self.norm3(x)))
        x = self.norm1(autograd.add(x, self._sa(x, *sa)))
        x = self.norm2(autograd.add(x, self._mha(x, memory, *ca)))
        return self.norm3(autograd.add(x, self._ff(x)))


def _clones(layer: Layer, n: int) -> list:
    if n <= 0:
        raise ValueError(f"num_layers must be positive, got {n}")
    devices = {id(t.device): t.device for t in layer.get_states().values()}
    devices[id(_device.get_default_device())] = _device.get_default_device()
    return [copy.deepcopy(layer, dict(devices)) for _ in range(n)]  # tensors copied, devices shared


class TransformerEncoder(Layer):
    """``num_layers`` copies of ``encoder_layer`` (deep copies, starting from the same
    weights, as PyTorch's), then ``norm`` when given."""

    def __init__(
        self, encoder_layer: Layer, num_layers: int, norm: Layer | None = None, name: str | None = None
    ):
        super().__init__(name)
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers = int(num_layers)
        self.norm = norm

    def forward(
        self,
        src: Tensor,
        mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        """Run every layer with the same masks."""
        x = src
        for layer in self.layers:
            x = layer(x, mask, src_key_padding_mask, is_causal)
        return self.norm(x) if self.norm is not None else x


class TransformerDecoder(Layer):
    """``num_layers`` copies of ``decoder_layer``, then ``norm`` when given."""

    def __init__(
        self, decoder_layer: Layer, num_layers: int, norm: Layer | None = None, name: str | None = None
    ):
        super().__init__(name)
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers = int(num_layers)
        self.norm = norm

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ) -> Tensor:
        """Run every layer over ``memory`` with the same masks."""
        x = tgt
        for layer in self.layers:
            x = layer(
                x,
                memory,
                tgt_mask,
                memory_mask,
                tgt_key_padding_mask,
                memory_key_padding_mask,
                tgt_is_causal,
                memory_is_causal,
            )
        return self.norm(x) if self.norm is not None else x
