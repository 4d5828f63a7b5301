"""The import handler of ONNX's LinearAttention (opset 27): the recurrence of linear
attention run token by token with autograd operators (so an imported model
fine-tunes), registered in the ``linalg`` family, whose MatMul is its main operator.

Per head, with state S (d_k, d_v), decay g_t (log-space) and rate beta_t:

- linear:      S_t = S + k_t v_t^T
- gated:       S_t = exp(g_t) S + k_t v_t^T
- delta:       S_t = S + beta_t k_t (v_t - S^T k_t)^T
- gated_delta: S_t = exp(g_t) S + beta_t k_t (v_t - exp(g_t) S^T k_t)^T

and o_t = scale q_t^T S_t. Query heads share key/value heads in groups (GQA). The
computation runs in float32 (or float64 for float64 inputs), as ONNX's reference does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa import autograd
from singa.autograd import elementwise, linalg
from singa.autograd import shaping as sh
from singa.sonnx.attention import repeat_heads, split_heads
from singa.sonnx.context import NodeContext, builds, keep_dtype
from singa.tensor import Tensor

RULES = ("linear", "gated", "delta", "gated_delta")


def _check(ctx: NodeContext, rule: str, decay: Any, beta: Any) -> None:
    if rule not in RULES:
        raise ctx.unsupported(f"update_rule {rule!r} (one of {', '.join(RULES)})")
    for name, given, needed in (
        ("decay", decay, rule in ("gated", "gated_delta")),
        ("beta", beta, rule in ("delta", "gated_delta")),
    ):
        if (given is not None) != needed:
            why = "requires" if needed else "takes no"
            raise ValueError(
                f"ONNX run: LinearAttention node {ctx.name!r}: update_rule {rule!r} {why} {name}"
            )


def _per_step(x: Tensor, heads: int, size: int) -> Tensor:
    """(B, T, heads * size) or (B, T, heads) -> (B, heads, T, size or 1)."""
    b, t, last = x.shape
    if last == heads:
        return autograd.transpose(autograd.reshape(x, (b, t, heads, 1)), (0, 2, 1, 3))
    return split_heads(x, heads)


def _step(x: Tensor, i: int) -> Tensor:
    """Position ``i`` of (B, H, T, D) as (B, H, 1, D)."""
    return autograd.slice(x, [i], [i + 1], [2])


def _inputs(ctx: NodeContext, xs: list, wide: Any) -> list:
    """The inputs cast to the computing dtype (absent ones None)."""
    return [None if x is None else keep_dtype(x, wide) for x in (list(xs) + [None] * 6)[:6]]


@builds(
    linalg.MatMul,
    elementwise.Mul,
    elementwise.Add,
    elementwise.Sub,
    elementwise.Exp,
    sh.Reshape,
    sh.Transpose,
    sh.Slice,
    sh.Cat,
    sh.Unsqueeze,
    sh.Expand,
)
def handle_linear_attention(ctx: NodeContext, xs: list) -> list:
    """LinearAttention: query/key/value (B, T, heads * size), optional past_state
    (B, kv_heads, d_k, d_v), decay (B, T, kv_heads or kv_heads * d_k) and beta
    (B, T, kv_heads or 1); outputs (B, T, q_heads * d_v) and the present state."""
    rule = ctx.attr("update_rule", "gated_delta")
    hq, hkv = int(ctx.attr("q_num_heads")), int(ctx.attr("kv_num_heads"))
    if hq <= 0 or hkv <= 0 or hq % hkv:
        raise ValueError(
            f"ONNX run: LinearAttention node {ctx.name!r}: q_num_heads {hq} is not a multiple of {hkv}"
        )
    out_dt = xs[0].dtype
    state_dt = xs[3].dtype if len(xs) > 3 and xs[3] is not None else out_dt
    wide = np.float64 if out_dt == np.float64 else np.float32
    q, k, v, state, decay, beta = _inputs(ctx, xs, wide)
    _check(ctx, rule, decay, beta)
    b, t, _ = q.shape
    dk, dv = q.shape[2] // hq, v.shape[2] // hkv
    q, k, v = split_heads(q, hq), split_heads(k, hkv), split_heads(v, hkv)
    if decay is not None:
        decay = autograd.exp(_per_step(decay, hkv, dk))  # (B, H, T, d_k or 1)
    if beta is not None:
        beta = _per_step(beta, beta.shape[2], 1)  # (B, H or 1, T, 1)
    if state is None:
        state = ctx.const(np.zeros((b, hkv, dk, dv), wide))
    scale = float(ctx.attr("scale", 0.0)) or 1.0 / float(np.sqrt(dk))
    outs = []
    for i in range(t):
        kt, vt = _step(k, i), _step(v, i)  # (B, H, 1, d)
        if decay is not None:  # exp(g) over the key axis of the state: (B, H, d_k or 1, 1)
            state = autograd.mul(state, autograd.transpose(_step(decay, i), (0, 1, 3, 2)))
        if beta is not None:
            vt = autograd.mul(_step(beta, i), autograd.sub(vt, autograd.matmul(kt, state)))
        state = autograd.add(state, autograd.matmul(autograd.transpose(kt, (0, 1, 3, 2)), vt))
        read = state if hq == hkv else repeat_heads(state, hq // hkv)
        outs.append(autograd.matmul(_step(q, i), read))  # (B, Hq, 1, d_v)
    o = autograd.mul(autograd.cat(outs, 2) if t > 1 else outs[0], ctx.const(np.asarray(scale, wide)))
    o = autograd.reshape(autograd.transpose(o, (0, 2, 1, 3)), (b, t, hq * dv))
    return [keep_dtype(o, out_dt), keep_dtype(state, state_dt)]
