"""The import handler of ONNX's Attention (opset 23+): scaled dot-product attention
composed of autograd operators (so an imported transformer fine-tunes), registered in
the ``linalg`` family, whose MatMul is its main operator.

The masks (``attn_mask``, ``is_causal``, ``nonpad_kv_seqlen``, sliding windows) are
folded into one additive bias, a constant of the node (no gradient flows into a mask).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import helper

from singa import autograd
from singa.autograd import activation, elementwise, indexing, linalg
from singa.autograd import shaping as sh
from singa.sonnx.context import NUMPY_TYPES, NodeContext, builds
from singa.tensor import Tensor


def split_heads(x: Tensor, heads: int) -> Tensor:
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    b, s, hidden = x.shape
    return autograd.transpose(autograd.reshape(x, (b, s, heads, hidden // heads)), (0, 2, 1, 3))


def repeat_heads(x: Tensor, reps: int) -> Tensor:
    """Each head repeated ``reps`` times in place: [h0, h0, h1, h1, ...]."""
    b, h, s, d = x.shape
    x = autograd.expand(autograd.unsqueeze(x, 2), (b, h, reps, s, d))
    return autograd.reshape(x, (b, h * reps, s, d))


def _allowed(q_len: int, kv_len: int, offset: Any, left: int, right: int, causal: bool) -> np.ndarray:
    """Where a query (row) may attend a key (column): causal and window limits aligned to
    the bottom right by ``offset`` (a scalar or one per batch)."""
    i = np.arange(q_len).reshape(q_len, 1)
    j = np.arange(kv_len).reshape(1, kv_len)
    off = np.asarray(offset).reshape(-1, 1, 1) if np.ndim(offset) else int(offset)
    diff = i + off - j
    ok = np.ones(np.shape(diff), bool)
    if causal:
        ok &= diff >= 0
    if left >= 0:
        ok &= diff <= left
    if right >= 0:
        ok &= -diff <= right
    return ok if np.ndim(offset) == 0 else ok.reshape(ok.shape[0], 1, q_len, kv_len)


def _bias(
    ctx: NodeContext, q_len: int, kv_len: int, mask: Any, past: int, nonpad: Any, dt: Any
) -> np.ndarray:
    """The additive bias (0 where attended, -inf elsewhere, plus a float mask)."""
    bias = np.zeros((q_len, kv_len), dt)
    if mask is not None:
        m = np.asarray(mask)
        if m.shape[-1] < kv_len:
            pad = [(0, 0)] * (m.ndim - 1) + [(0, kv_len - m.shape[-1])]
            m = np.pad(m, pad, constant_values=False if m.dtype == bool else -np.inf)
        bias = bias + (np.where(m, 0, -np.inf).astype(dt) if m.dtype == bool else m.astype(dt))
    causal = bool(int(ctx.attr("is_causal", 0)))
    left, right = int(ctx.attr("left_window_size", -1)), int(ctx.attr("right_window_size", -1))
    if causal or left >= 0 or right >= 0:
        offset = np.asarray(nonpad).reshape(-1) - q_len if nonpad is not None and not past else past
        bias = bias + np.where(_allowed(q_len, kv_len, offset, left, right, causal), 0, -np.inf).astype(dt)
    if nonpad is not None:
        keep = np.arange(kv_len) < np.asarray(nonpad).reshape(-1, 1)
        bias = bias + np.where(keep, 0, -np.inf).astype(dt).reshape(-1, 1, 1, kv_len)
    return bias


def _inputs(ctx: NodeContext, xs: list) -> tuple:
    """Q, K, V as (batch, heads, seq, size), the optional inputs, and whether Q was 3-D."""
    xs = list(xs) + [None] * (7 - len(xs))
    q, k, v, mask, past_k, past_v, nonpad = xs[:7]
    three_d = q.ndim() == 3
    if three_d:
        q = split_heads(q, int(ctx.attr("q_num_heads")))
        k = split_heads(k, int(ctx.attr("kv_num_heads")))
        v = split_heads(v, int(ctx.attr("kv_num_heads")))
    if past_k is not None:
        k = autograd.cat([past_k, k], 2)
        v = autograd.cat([past_v, v], 2)
    return q, k, v, mask, past_k, nonpad, three_d


def _scores(ctx: NodeContext, q: Tensor, k: Tensor) -> Tensor:
    """(Q * sqrt(scale)) @ (K * sqrt(scale))^T, soft-capped when ``softcap`` > 0."""
    scale = ctx.attr("scale")
    scale = 1 / np.sqrt(q.shape[3]) if scale is None else float(scale)
    root = ctx.const(np.sqrt(scale), q.dtype)
    if q.shape[1] != k.shape[1]:
        reps = q.shape[1] // k.shape[1]
        k = repeat_heads(k, reps)
    kt = autograd.transpose(autograd.mul(k, root), (0, 1, 3, 2))
    qk = autograd.matmul(autograd.mul(q, root), kt)
    cap = float(ctx.attr("softcap", 0.0))
    if cap > 0:
        qk = autograd.mul(
            autograd.tanh(autograd.mul(qk, ctx.const(1 / cap, qk.dtype))), ctx.const(cap, qk.dtype)
        )
    return qk


def _probabilities(ctx: NodeContext, logits: Tensor, bias: np.ndarray, dt: Any) -> Tensor:
    """Softmax over keys (in ``softmax_precision``); rows with no attendable key are 0."""
    masked_rows = np.isneginf(bias.max(axis=-1, keepdims=True))
    precision = ctx.attr("softmax_precision")
    if precision is not None:
        want = np.dtype(helper.tensor_dtype_to_np_dtype(int(precision)))
        if want != logits.dtype:
            logits = autograd.cast(logits, want)
    p = activation.softmax(logits, -1)
    if masked_rows.any():
        p = autograd.where(ctx.const(0, p.dtype), p, ctx.const(np.broadcast_to(masked_rows, p.shape)))
    return p if p.dtype == dt else autograd.cast(p, dt)


@builds(
    linalg.MatMul,
    elementwise.Mul,
    elementwise.Add,
    elementwise.Cast,
    activation.SoftMax,
    activation.Tanh,
    sh.Reshape,
    sh.Transpose,
    sh.Cat,
    sh.Expand,
    sh.Unsqueeze,
    indexing.Where,
)
def handle_attention(ctx: NodeContext, xs: list) -> list:
    """Attention: ``softmax(Q K^T * scale + bias) V`` with grouped key/value heads, a
    key/value cache (``past_key``, ``past_value``) and the ``qk_matmul_output``."""
    if xs[0].dtype.name not in NUMPY_TYPES:
        raise ctx.unsupported(f"element type {xs[0].dtype} is not supported")
    q, k, v, mask, past_k, nonpad, three_d = _inputs(ctx, xs)
    past = 0 if past_k is None else past_k.shape[2]
    mask_arr = None if mask is None else ctx.static(mask)
    nonpad_arr = None if nonpad is None else ctx.static(nonpad)
    bias = _bias(ctx, q.shape[2], k.shape[2], mask_arr, past, nonpad_arr, q.dtype)
    qk = _scores(ctx, q, k)
    safe = np.where(np.isneginf(bias.max(axis=-1, keepdims=True)), 0, bias).astype(q.dtype)
    logits = autograd.add(qk, ctx.const(safe))
    p = _probabilities(ctx, logits, bias, q.dtype)
    vv = v if v.shape[1] == q.shape[1] else repeat_heads(v, q.shape[1] // v.shape[1])
    y = autograd.matmul(p, vv)
    if three_d:
        b, h, s, d = y.shape
        y = autograd.reshape(autograd.transpose(y, (0, 2, 1, 3)), (b, s, h * d))
    mode = int(ctx.attr("qk_matmul_output_mode", 0))
    if mode == 2:
        extra = autograd.add(qk, ctx.const(bias))
    elif mode == 3:
        extra = p
    else:
        extra = qk
    return [y, k, v, extra]
