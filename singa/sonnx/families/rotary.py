"""Rotary position embeddings: ONNX RotaryEmbedding (opset 23), built of autograd
operators (slices, products, concatenation), so it is differentiable in its input and
caches."""

from __future__ import annotations

from singa import autograd
from singa.autograd import elementwise as ew
from singa.autograd import indexing as ix
from singa.autograd import shaping as sh
from singa.sonnx.context import NodeContext, builds
from singa.tensor import Tensor


def _last(x: Tensor, start: int, stop: int, step: int = 1) -> Tensor:
    return autograd.slice(x, [start], [stop], [x.ndim() - 1], [step])


def rotate(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool) -> Tensor:
    """The rotary rotation of ``x`` (..., rd) by ``cos``/``sin`` (..., rd / 2): pairs are
    neighbours (``interleaved``) or the two halves."""
    rd = x.shape[-1]
    if interleaved:
        x1, x2 = _last(x, 0, rd, 2), _last(x, 1, rd, 2)
    else:
        x1, x2 = _last(x, 0, rd // 2), _last(x, rd // 2, rd)
    real = ew.sub(ew.mul(cos, x1), ew.mul(sin, x2))
    imag = ew.add(ew.mul(sin, x1), ew.mul(cos, x2))
    if not interleaved:
        return autograd.cat([real, imag], x.ndim() - 1)
    pairs = autograd.cat(
        [autograd.unsqueeze(real, [x.ndim()]), autograd.unsqueeze(imag, [x.ndim()])], x.ndim()
    )
    return autograd.reshape(pairs, tuple(x.shape))


@builds(sh.Transpose, sh.Reshape, sh.Slice, ix.Gather, sh.Unsqueeze, ew.Mul, ew.Sub, ew.Add, sh.Cat)
def handle_rotary_embedding(ctx: NodeContext, xs: list) -> Tensor:
    """RotaryEmbedding(input, cos_cache, sin_cache, position_ids) with ``interleaved``,
    ``rotary_embedding_dim`` (0: the whole head) and ``num_heads`` (3-D inputs)."""
    x, cos, sin = xs[0], xs[1], xs[2]
    shape = tuple(x.shape)
    if x.ndim() == 4:  # (batch, heads, seq, head) -> (batch, seq, heads, head)
        x = autograd.transpose(x, [0, 2, 1, 3])
    else:
        heads = int(ctx.attr("num_heads", 0))
        if not heads:
            raise ctx.unsupported("a 3-D input needs num_heads")
        x = autograd.reshape(x, (shape[0], shape[1], heads, shape[2] // heads))
    head = x.shape[3]
    rd = int(ctx.attr("rotary_embedding_dim", 0)) or head
    if len(xs) > 3 and xs[3] is not None:
        cos, sin = autograd.gather(cos, 0, xs[3]), autograd.gather(sin, 0, xs[3])
    cos, sin = autograd.unsqueeze(cos, [2]), autograd.unsqueeze(sin, [2])  # (batch, seq, 1, rd / 2)
    y = rotate(_last(x, 0, rd), cos, sin, bool(ctx.attr("interleaved", 0)))
    if rd < head:
        y = autograd.cat([y, _last(x, rd, head)], 3)
    if len(shape) == 3:
        return autograd.reshape(y, shape)
    return autograd.transpose(y, [0, 2, 1, 3])


EXPORT: dict = {}
IMPORT = {"RotaryEmbedding": handle_rotary_embedding}
