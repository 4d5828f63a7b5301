"""Sampling from :class:`~singa.zoo.gpt.GPT` with a key/value cache.

The prompt runs once through every block (causal attention), keeping each block's keys
and values (batch, heads, length, head size); each new token then runs through the
blocks alone, its query attending the cached keys and values plus its own, so a token
costs one position, not the whole window. Within the context the logits equal those of
rerunning the whole sequence (a test checks it). When the window is full (``context``
positions, learned absolute positions), the last ``context // 2`` tokens are run again
as a new prompt and generation continues from there; the cache-less loop
(``use_cache=False``, nanoGPT's) reruns the last ``context`` tokens at every step.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa import autograd
from singa.tensor import Tensor

__all__ = ["generate", "sample", "prefill", "step"]


def _split_heads(x: Tensor, heads: int) -> Tensor:
    b, t, d = x.shape
    return autograd.transpose(autograd.reshape(x, (b, t, heads, d // heads)), (0, 2, 1, 3))


def _block(blk: Any, x: Tensor, cache: tuple | None) -> tuple[Tensor, tuple]:
    """One pre-norm block on new positions x (B, T, D) given the cached (k, v) of the
    earlier ones (None: x is the whole sequence, attended causally)."""
    att = blk.self_attn
    h = blk.norm1(x)
    q = _split_heads(att.q_proj(h), att.num_heads)
    k = _split_heads(att.k_proj(h), att.num_heads)
    v = _split_heads(att.v_proj(h), att.num_heads)
    if cache is not None:
        k = autograd.cat([cache[0], k], 2)
        v = autograd.cat([cache[1], v], 2)
    y = autograd.scaled_dot_product_attention(q, k, v, is_causal=cache is None)
    b, _, t, _ = y.shape
    y = att.out_proj(autograd.reshape(autograd.transpose(y, (0, 2, 1, 3)), (b, t, att.embed_dim)))
    x = autograd.add(x, y)
    ff = blk.linear2(blk.activation(blk.linear1(blk.norm2(x))))
    return autograd.add(x, ff), (k, v)


def prefill(model: Any, ids: np.ndarray) -> tuple[np.ndarray, list]:
    """Run token ids (B, T) through the model; the last position's logits (B, vocab)
    and every block's (k, v)."""
    x = Tensor.wrap(model.tok_emb.W.device.xp.asarray(ids), model.tok_emb.W.device)
    h = model.embed(x)
    caches = []
    for blk in model.blocks:
        h, kv = _block(blk, h, None)
        caches.append(kv)
    return _last_logits(model, h), caches


def step(model: Any, tokens: np.ndarray, pos: int, caches: list) -> tuple[np.ndarray, list]:
    """Run one new token per row (B,) at position ``pos`` through the cached blocks."""
    dev = model.tok_emb.W.device
    x = Tensor.wrap(dev.xp.asarray(tokens.reshape(-1, 1)), dev)
    e = model.tok_emb(x)
    p = Tensor.wrap(model.pos_emb.W.data[pos : pos + 1], dev)
    h = autograd.add(e, p)
    new = []
    for blk, kv in zip(model.blocks, caches):
        h, kv = _block(blk, h, kv)
        new.append(kv)
    return _last_logits(model, h), new


def _last_logits(model: Any, h: Tensor) -> np.ndarray:
    b, t, d = h.shape
    last = Tensor.wrap(h.data[:, t - 1 : t], h.device)
    return model.head(last).to_numpy()[:, 0].astype(np.float64)


def sample(logits: np.ndarray, temperature: float, top_k: int | None, rng: np.random.Generator) -> np.ndarray:
    """One token per row of logits (B, vocab): greedy for temperature 0, else from
    softmax(logits / temperature) restricted to the ``top_k`` likeliest."""
    if temperature == 0:
        return logits.argmax(axis=1)
    z = logits / temperature
    if top_k is not None and top_k < z.shape[1]:
        kth = np.partition(z, -top_k, axis=1)[:, -top_k][:, None]
        z = np.where(z < kth, -np.inf, z)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    cdf = np.cumsum(p, axis=1)
    u = rng.random(z.shape[0]) * cdf[:, -1]
    return np.minimum((cdf < u[:, None]).sum(axis=1), z.shape[1] - 1)


def _check(model: Any, prompt: Any, max_tokens: int, temperature: float, top_k: int | None) -> np.ndarray:
    ids = np.asarray(prompt)
    if ids.ndim == 1:
        ids = ids[None]
    if ids.ndim != 2 or ids.shape[1] == 0 or ids.dtype.kind not in "iu":
        raise ValueError(f"generate: the prompt must be non-empty integer token ids, got shape {ids.shape}")
    if ids.min() < 0 or ids.max() >= model.vocab_size:
        raise ValueError(
            f"generate: prompt tokens must be in [0, {model.vocab_size}), got {ids.min()}..{ids.max()}"
        )
    if int(max_tokens) < 0:
        raise ValueError(f"generate: max_tokens must be >= 0, got {max_tokens}")
    if not temperature >= 0:
        raise ValueError(f"generate: temperature must be >= 0, got {temperature}")
    if top_k is not None and int(top_k) < 1:
        raise ValueError(f"generate: top_k must be >= 1, got {top_k}")
    return ids.astype(np.int64)


def generate(
    model: Any,
    prompt: Any,
    max_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int | None = None,
    use_cache: bool = True,
) -> np.ndarray:
    """See :meth:`singa.zoo.gpt.GPT.generate`."""
    ids = _check(model, prompt, max_tokens, temperature, top_k)
    rng = np.random.default_rng(seed)
    was_training = model.training
    model.eval()
    try:
        with autograd.no_grad():
            return _loop(model, ids, int(max_tokens), float(temperature), top_k, rng, use_cache)
    finally:
        model.train(was_training)


def _loop(
    model: Any, ids: np.ndarray, n: int, temperature: float, top_k: Any, rng: Any, cached: bool
) -> np.ndarray:
    ctx = model.context
    if not cached:
        for _ in range(n):
            logits = prefill(model, ids[:, -ctx:])[0]
            ids = np.concatenate([ids, sample(logits, temperature, top_k, rng)[:, None]], axis=1)
        return ids
    window = ids[:, -ctx:]
    logits, caches = prefill(model, window)
    pos = window.shape[1]
    for i in range(n):
        nxt = sample(logits, temperature, top_k, rng)
        ids = np.concatenate([ids, nxt[:, None]], axis=1)
        if i == n - 1:
            break
        if pos == ctx:  # the window is full: start again from its second half
            keep = max(1, ctx // 2)
            logits, caches = prefill(model, ids[:, -keep:])
            pos = keep
        else:
            logits, caches = step(model, nxt, pos, caches)
            pos += 1
    return ids
