"""ONNX's ``ai.onnx.preview`` domain: FlexAttention, scaled dot-product attention with
graph attributes that rewrite the scores (``score_mod``) and the probabilities
(``prob_mod``), built of autograd operators (the subgraphs too), so it is differentiable.
``IMPORT`` (the default domain) is empty.
"""

from __future__ import annotations

import numpy as np

from singa import autograd
from singa.autograd import activation, elementwise, linalg
from singa.autograd import shaping as sh
from singa.sonnx.attention import repeat_heads
from singa.sonnx.context import NodeContext, builds, keep_dtype, np_dtype, runs_subgraphs
from singa.tensor import Tensor

DOMAIN = "ai.onnx.preview"


def _modified(ctx: NodeContext, name: str, t: Tensor) -> Tensor:
    """``t`` through the node's graph attribute ``name`` (one input, one output), if any."""
    graph = ctx.subgraphs.get(name)
    if graph is None:
        return t
    outs = graph.run([t], ctx.scope, ctx.training)
    if len(outs) != 1:
        raise ValueError(
            f"ONNX run: FlexAttention node {ctx.name!r}: {name} gives {len(outs)} outputs, not 1"
        )
    return keep_dtype(outs[0], t.dtype)


@runs_subgraphs
@builds(linalg.MatMul, elementwise.Mul, sh.Transpose, sh.Expand, sh.Reshape, activation.SoftMax)
def handle_flex_attention(ctx: NodeContext, xs: list) -> Tensor:
    """FlexAttention(Q, K, V; scale, score_mod, prob_mod, softmax_precision) on
    (batch, heads, length, size) inputs: softmax over keys of the scaled scores, each
    rewritten by its graph attribute, times V; key/value heads shared by groups of query
    heads (GQA). Scores and probabilities are float32 for float16 inputs, or the type
    ``softmax_precision`` names."""
    q, k, v = xs[:3]
    if q.ndim() != 4 or k.ndim() != 4 or v.ndim() != 4:
        raise ValueError(f"ONNX run: FlexAttention node {ctx.name!r}: rank-4 Q, K, V expected")
    hq, hkv = q.shape[1], k.shape[1]
    if hq % hkv:
        raise ValueError(f"ONNX run: FlexAttention node {ctx.name!r}: {hq} query heads, {hkv} key heads")
    if hq != hkv:
        k, v = repeat_heads(k, hq // hkv), repeat_heads(v, hq // hkv)
    scale = ctx.attr("scale")
    root = ctx.const(np.sqrt(np.float32(1.0 / np.sqrt(q.shape[3]) if scale is None else scale)), q.dtype)
    scores = autograd.matmul(autograd.mul(q, root), autograd.transpose(autograd.mul(k, root), (0, 1, 3, 2)))
    precision = ctx.attr("softmax_precision")
    wide = np_dtype(ctx, int(precision)) if precision is not None else np.dtype(np.float32)
    if precision is None and q.dtype.itemsize >= 4:
        wide = q.dtype
    scores = _modified(ctx, "score_mod", keep_dtype(scores, wide))
    probs = _modified(ctx, "prob_mod", autograd.softmax(scores, -1))
    return keep_dtype(autograd.matmul(probs, keep_dtype(v, wide)), v.dtype)


EXPORT: dict = {}
IMPORT: dict = {}
DOMAIN_IMPORT = {"FlexAttention": handle_flex_attention}
