"""The PyTorch twin of the zoo's ``gpt`` (same blocks, same tied head), for the
benchmarks and the end-to-end loss comparison. PyTorch is a judge only: the package
never imports this.

:func:`twin_of` builds the twin with a singa GPT's weights copied in, so both start
from the same point. :func:`generate_cached` is a key/value-cached sampler for the
twin (the equivalent of ``singa.zoo.gpt_cache``); :func:`generate_plain` is nanoGPT's
cache-less loop.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class TorchGPT(nn.Module):
    """Embedding + learned positions -> pre-norm GELU encoder blocks, causal -> LayerNorm
    -> logits through the embedding's transpose."""

    def __init__(self, vocab: int, layers: int = 4, heads: int = 4, width: int = 128, context: int = 128):
        super().__init__()
        self.context = context
        self.tok_emb = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.zeros(context, width))
        block = nn.TransformerEncoderLayer(
            width, heads, 4 * width, 0.0, activation="gelu", norm_first=True, batch_first=True
        )
        self.blocks = nn.ModuleList([copy.deepcopy(block) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(width)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, vocab)."""
        t = idx.shape[1]
        h = self.tok_emb(idx) + self.pos[:t]
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        for blk in self.blocks:
            h = blk(h, src_mask=mask, is_causal=True)
        return self.ln_f(h) @ self.tok_emb.weight.T


def _t(a) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a.to_numpy(), dtype=np.float32))


def twin_of(model) -> TorchGPT:
    """A TorchGPT holding the weights of a singa ``zoo.gpt.GPT``."""
    tw = TorchGPT(model.vocab_size, model.num_layers, model.num_heads, model.width, model.context)
    with torch.no_grad():
        tw.tok_emb.weight.copy_(_t(model.tok_emb.W))
        tw.pos.copy_(_t(model.pos_emb.W))
        for ours, theirs in zip(model.blocks, tw.blocks):
            a = ours.self_attn
            theirs.self_attn.in_proj_weight.copy_(
                torch.cat([_t(p.W).T for p in (a.q_proj, a.k_proj, a.v_proj)])
            )
            theirs.self_attn.in_proj_bias.copy_(torch.cat([_t(p.b) for p in (a.q_proj, a.k_proj, a.v_proj)]))
            theirs.self_attn.out_proj.weight.copy_(_t(a.out_proj.W).T)
            theirs.self_attn.out_proj.bias.copy_(_t(a.out_proj.b))
            for name in ("linear1", "linear2"):
                getattr(theirs, name).weight.copy_(_t(getattr(ours, name).W).T)
                getattr(theirs, name).bias.copy_(_t(getattr(ours, name).b))
            for name in ("norm1", "norm2"):
                getattr(theirs, name).weight.copy_(_t(getattr(ours, name).scale))
                getattr(theirs, name).bias.copy_(_t(getattr(ours, name).bias))
        tw.ln_f.weight.copy_(_t(model.ln_f.scale))
        tw.ln_f.bias.copy_(_t(model.ln_f.bias))
    return tw


def _sample(logits: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=gen)


@torch.no_grad()
def generate_plain(tw: TorchGPT, idx: torch.Tensor, n: int, seed: int = 0) -> torch.Tensor:
    """nanoGPT's loop: the whole (cropped) window reruns for every new token."""
    gen = torch.Generator().manual_seed(seed)
    for _ in range(n):
        logits = tw(idx[:, -tw.context :])[:, -1]
        idx = torch.cat([idx, _sample(logits, gen)], dim=1)
    return idx


def _block_step(blk, x: torch.Tensor, cache):
    att = blk.self_attn
    h = blk.norm1(x)
    q, k, v = F.linear(h, att.in_proj_weight, att.in_proj_bias).chunk(3, dim=-1)
    b, t, e = q.shape
    heads = att.num_heads

    def split(z):
        return z.view(b, t, heads, e // heads).transpose(1, 2)

    q, k, v = split(q), split(k), split(v)
    if cache is not None:
        k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None)
    x = x + att.out_proj(y.transpose(1, 2).reshape(b, t, e))
    x = x + blk.linear2(F.gelu(blk.linear1(blk.norm2(x))))
    return x, (k, v)


@torch.no_grad()
def generate_cached(tw: TorchGPT, idx: torch.Tensor, n: int, seed: int = 0) -> torch.Tensor:
    """The same sampling with a key/value cache (one position per new token; the
    prompt plus ``n`` must fit the context)."""
    gen = torch.Generator().manual_seed(seed)
    h = tw.tok_emb(idx) + tw.pos[: idx.shape[1]]
    caches = []
    for blk in tw.blocks:
        h, kv = _block_step(blk, h, None)
        caches.append(kv)
    for i in range(n):
        logits = tw.ln_f(h[:, -1:]) @ tw.tok_emb.weight.T
        nxt = _sample(logits[:, -1], gen)
        idx = torch.cat([idx, nxt], dim=1)
        if i == n - 1:
            break
        pos = idx.shape[1] - 1
        h = tw.tok_emb(nxt) + tw.pos[pos : pos + 1]
        new = []
        for blk, kv in zip(tw.blocks, caches):
            h, kv = _block_step(blk, h, kv)
            new.append(kv)
        caches = new
    return idx
