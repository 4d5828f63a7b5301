"""A small decoder-only language model (nanoGPT's recipe, character or byte level).

Token embedding + learned positions -> ``num_layers`` pre-norm blocks
(:class:`~singa.layer.TransformerEncoderLayer` with ``norm_first=True``, GELU,
feed-forward 4x the width, causal self-attention) -> LayerNorm -> logits through the
token embedding's transpose (weight tying). Defaults: 4 layers, 4 heads, width 128,
context 128. Initialisation as nanoGPT: every weight N(0, 0.02), the residual
projections (``out_proj``, ``linear2``) N(0, 0.02 / sqrt(2 * num_layers)), biases 0.

``train_one_batch(x, y)`` takes token ids x (B, T) and the next tokens y (B, T) and
minimises their mean cross-entropy. :meth:`GPT.generate` samples with a key/value
cache (:mod:`singa.zoo.gpt_cache`), so each new token costs one position.

Example::

    from singa import opt, zoo
    m = zoo.create("gpt", num_classes=65)          # num_classes: the vocabulary size
    m.set_optimizer(opt.AdamW(lr=1e-3))
    out, loss = m(tx, ty)                          # tx, ty: int tokens (B, T)
    ids = m.generate([[1, 2, 3]], max_tokens=50, temperature=0.8, top_k=10, seed=0)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from singa import autograd, layer, model
from singa.opt.dist import backward_with_option
from singa.tensor import Tensor

__all__ = ["GPT", "create_model"]


class GPT(model.Model):
    """Decoder-only transformer language model.

    Args:
        num_classes: the vocabulary size (the zoo's name for the number of outputs).
        num_channels, image_size: ignored (the zoo's common signature).
        num_layers, num_heads, width: the blocks, heads per block and model width.
        context: the longest sequence (positions learned).
        dropout: dropout in attention, feed-forward and after the embeddings.
    """

    def __init__(
        self,
        num_classes: int = 256,
        num_channels: int = 1,
        image_size: Any = None,
        num_layers: int = 4,
        num_heads: int = 4,
        width: int = 128,
        context: int = 128,
        dropout: float = 0.0,
    ):
        super().__init__()
        if int(num_classes) < 2:
            raise ValueError(f"GPT: the vocabulary needs at least 2 tokens, got {num_classes}")
        self.vocab_size, self.num_layers, self.num_heads = int(num_classes), int(num_layers), int(num_heads)
        self.width, self.context, self.dropout = int(width), int(context), float(dropout)
        self.tok_emb = layer.Embedding(self.vocab_size, self.width)
        self.pos_emb = layer.PositionalEmbedding(self.context, self.width)
        self.drop = layer.Dropout(self.dropout)
        block = layer.TransformerEncoderLayer(
            self.width, self.num_heads, 4 * self.width, self.dropout, "gelu", norm_first=True
        )
        self.blocks = layer.TransformerEncoder(block, self.num_layers).layers
        self.ln_f = layer.LayerNorm(self.width)
        self.softmax_cross_entropy = layer.SoftMaxCrossEntropy()
        self._init_weights()

    def _init_weights(self) -> None:
        rng_std = 0.02
        residual = 0.02 / math.sqrt(2 * self.num_layers)
        self.tok_emb.W.gaussian(0.0, rng_std)
        for blk in self.blocks:
            att = blk.self_attn
            for lin in (att.q_proj, att.k_proj, att.v_proj, att.out_proj, blk.linear1, blk.linear2):
                std = residual if lin is att.out_proj or lin is blk.linear2 else rng_std
                lin.W.gaussian(0.0, std)
                lin.b.set_value(0.0)

    def _check_tokens(self, x: Tensor) -> None:
        if x.ndim() != 2 or x.dtype.kind not in "iu":
            raise ValueError(
                f"GPT: expected integer token ids (batch, length), got {x.dtype} of shape {x.shape}"
            )
        if x.shape[1] > self.context:
            raise ValueError(
                f"GPT: the sequence of length {x.shape[1]} is longer than the context {self.context}"
            )

    def embed(self, x: Tensor) -> Tensor:
        """Token plus position embeddings (B, T, width)."""
        return self.drop(self.pos_emb(self.tok_emb(x)))

    def head(self, h: Tensor) -> Tensor:
        """Final LayerNorm and the tied output projection: logits (B, T, vocab)."""
        return autograd.matmul(self.ln_f(h), autograd.transpose(self.tok_emb.W, (1, 0)))

    def forward(self, x: Tensor) -> Tensor:
        """The next-token logits (B, T, vocab) of token ids x (B, T)."""
        self._check_tokens(x)
        h = self.embed(x)
        for blk in self.blocks:
            h = blk(h, is_causal=True)
        return self.head(h)

    def loss(self, out: Tensor, y: Tensor) -> Tensor:
        """Mean cross-entropy of logits (B, T, vocab) against next tokens (B, T)."""
        b, t, v = out.shape
        return self.softmax_cross_entropy(autograd.reshape(out, (b * t, v)), autograd.reshape(y, (b * t,)))

    def train_one_batch(self, x: Tensor, y: Tensor, dist_option: str = "plain", spars: Any = None) -> tuple:
        """One step: forward, cross-entropy against ``y``, backward and update.
        Returns ``(logits, loss)``."""
        if self.optimizer is None:
            raise RuntimeError("GPT: call set_optimizer(...) before training")
        out = self.forward(x)
        loss = self.loss(out, y)
        backward_with_option(self.optimizer, loss, dist_option, spars)
        return out, loss

    def generate(
        self,
        prompt: Any,
        max_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int | None = None,
        use_cache: bool = True,
    ) -> np.ndarray:
        """Sample ``max_tokens`` tokens after ``prompt`` (token ids (B, P) or (P,)),
        returning the prompt and the new tokens (B, P + max_tokens) as int64.
        ``temperature`` 0 is greedy; ``top_k`` keeps the k likeliest tokens; ``seed``
        makes it repeat. With ``use_cache`` (default) each new token costs one position
        (see :mod:`singa.zoo.gpt_cache`); without, every step reruns the whole window."""
        from singa.zoo import gpt_cache

        return gpt_cache.generate(self, prompt, max_tokens, temperature, top_k, seed, use_cache)

    def __repr__(self) -> str:
        return (
            f"GPT(vocab_size={self.vocab_size}, num_layers={self.num_layers}, num_heads={self.num_heads}, "
            f"width={self.width}, context={self.context})"
        )


def create_model(**kwargs: Any) -> GPT:
    """A :class:`GPT` (SINGA's model-module factory form)."""
    return GPT(**kwargs)
