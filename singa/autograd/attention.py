"""Attention: scaled dot-product attention and softmax with a mask.

``scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale)`` is
PyTorch's ``F.scaled_dot_product_attention`` on (..., L, E) queries, (..., S, E) keys
and (..., S, Ev) values: ``softmax(q k^T * scale + mask) v``. A boolean mask marks the
pairs that may attend (True) and a float mask is added to the scores; ``is_causal``
lets query i attend keys 0..i (top-left aligned, as PyTorch). A row with no key to
attend gives zeros (PyTorch's SDPA does the same), never NaN.

Memory: the leading (batch, head) pairs are processed in blocks whose score blocks
take at most :data:`BLOCK_BYTES`, so at most one such block of (L x S) scores (and its
probabilities) exists at a time during the forward; the probabilities are kept for
backward while all of them fit in :data:`KEEP_BYTES`, else each block is recomputed
in backward (FlashAttention's trade: one more product for no kept scores), with the
same bits as in the forward. Scores and softmax are computed in float32 for float16
inputs (and the products too, as matmul does on the CPU).

On the CPU each block's (batch x head) rows are cut into pieces run on the workers
(:mod:`singa.kernels.workers`; pieces depend on the sizes only, so one or two workers
give the same bits), and float32 scores without a mask take the compiled row softmax
of :mod:`singa.kernels.attention_rows` (a causal row stops at its diagonal).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from singa.autograd.engine import Operation, check_same_dtype, unbroadcast
from singa.device import array_module
from singa.kernels import workers
from singa.kernels.attention_rows import softmax_rows, softmax_rows_grad
from singa.tensor import Tensor

__all__ = ["scaled_dot_product_attention", "masked_softmax"]

#: the largest block of scores computed at once (bytes)
BLOCK_BYTES = 16 << 20
#: the probabilities of every block are kept for backward up to this size (bytes);
#: above it backward recomputes them block by block from the kept log-sum-exp
KEEP_BYTES = 64 << 20


def compute_dtype(a: Any) -> Any:
    """The dtype scores and softmax are computed in: float32 for float16 inputs."""
    return np.float32 if a.dtype.itemsize < 4 else a.dtype


def _lowest(dt: Any) -> float:
    return float(np.finfo(dt).min)


def causal_allowed(xp: Any, q_len: int, kv_len: int) -> Any:
    """(L, S) booleans: query i may attend key j when j <= i (top-left aligned)."""
    return xp.tril(xp.ones((q_len, kv_len), dtype=bool))


def _softmax_rows(s: Any, xp: Any) -> Any:
    """Softmax over the last axis of scores ``s`` (with -inf where masked), in place;
    rows with no finite score give zeros."""
    m = s.max(axis=-1, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0)
    s -= m
    xp.exp(s, out=s)
    z = s.sum(axis=-1, keepdims=True)
    s /= xp.where(z > 0, z, 1)
    return s


class ScaledDotProductAttention(Operation):
    """softmax(q k^T * scale + bias) v over the last two axes, blockwise over the
    leading ones; inputs (q, k, v) or (q, k, v, mask). The mask (boolean: True attends;
    float: added) broadcasts to (..., L, S); a float mask gets a gradient."""

    def __init__(
        self,
        scale: float,
        is_causal: bool = False,
        dropout_p: float = 0.0,
        mask_is_bool: bool = False,
        device: Any = None,
    ):
        super().__init__()
        self.scale = float(scale)
        self.is_causal = bool(is_causal)
        self.dropout_p = float(dropout_p)
        self.mask_is_bool = bool(mask_is_bool)
        self.device = device

    # ----- helpers ---------------------------------------------------------------------
    def _blocks(self, n: int, q_len: int, kv_len: int, itemsize: int) -> list:
        per = max(1, BLOCK_BYTES // max(1, q_len * kv_len * itemsize))
        return [(i, min(n, i + per)) for i in range(0, n, per)]

    def _bias_block(self, xp: Any, mask: Any, lead: tuple, i0: int, i1: int, shape: tuple, dt: Any) -> Any:
        """The additive bias of leading rows i0..i1 (None when there is none)."""
        q_len, kv_len = shape
        bias = None
        if mask is not None:
            full = xp.broadcast_to(mask, lead + shape)
            idx = np.unravel_index(np.arange(i0, i1), lead) if lead else ()
            blk = full[idx] if lead else full[None]
            if self.mask_is_bool:
                bias = xp.where(blk, 0, -xp.inf).astype(dt)
            else:
                bias = blk.astype(dt)
        if self.is_causal:
            c = xp.where(causal_allowed(xp, q_len, kv_len), 0, -xp.inf).astype(dt)
            bias = c[None] if bias is None else bias + c
        return bias

    def _drop_mask(self, shape: tuple, dt: Any) -> Any:
        u = self.device.rng.random(shape, dtype=np.float64 if dt == np.float64 else np.float32)
        keep = (u >= self.dropout_p).astype(dt)
        keep *= 1.0 / (1.0 - self.dropout_p)
        return keep

    def _probs_into(self, xp: Any, s: Any, rows: tuple, q3: Any, k3: Any, mask: Any, lead: tuple) -> None:
        """The attention probabilities of leading rows ``rows`` written into ``s``: the
        compiled row kernel for float32 numpy arrays without a mask, else the array
        expression. The same bits whenever they are computed (forward or backward)."""
        i0, i1 = rows
        xp.matmul(q3[i0:i1], k3[i0:i1].transpose(0, 2, 1), out=s)
        if mask is None and s.dtype == np.float32 and type(s) is np.ndarray:
            softmax_rows(s, self.scale, self.is_causal, np.empty(s.shape[:2], np.float32))
            return
        s *= self.scale
        bias = self._bias_block(xp, mask, lead, i0, i1, s.shape[1:], s.dtype)
        if bias is not None:
            s += bias
        _softmax_rows(s, xp)

    # ----- forward / backward ----------------------------------------------------------
    def forward(self, q, k, v, mask=None):
        xp = array_module(q)
        dt = compute_dtype(q)
        lead, (q_len, d), kv_len, dv = q.shape[:-2], q.shape[-2:], k.shape[-2], v.shape[-1]
        n = math.prod(lead)
        q3 = q.reshape(n, q_len, d).astype(dt, copy=False)
        k3 = k.reshape(n, kv_len, d).astype(dt, copy=False)
        v3 = v.reshape(n, kv_len, dv).astype(dt, copy=False)
        out = xp.empty((n, q_len, dv), dtype=dt)
        keep_p = self.requires_grad and n * q_len * kv_len * np.dtype(dt).itemsize <= KEEP_BYTES
        probs, drops = [], []
        for i0, i1 in self._blocks(n, q_len, kv_len, np.dtype(dt).itemsize):
            p = xp.empty((i1 - i0, q_len, kv_len), dtype=dt)
            keep = self._drop_mask(p.shape, dt) if self.dropout_p > 0 else None

            def piece(a: int, b: int, i0: int = i0, p: Any = p, keep: Any = keep) -> None:
                self._probs_into(xp, p[a:b], (i0 + a, i0 + b), q3, k3, mask, lead)
                pd = p[a:b] if keep is None else p[a:b] * keep[a:b]
                xp.matmul(pd, v3[i0 + a : i0 + b], out=out[i0 + a : i0 + b])

            workers.run_pieces(piece, workers.work_pieces(i1 - i0, 2 * p.size), xp)
            if keep is not None:
                drops.append(keep)
            if keep_p:
                probs.append(p)
        if self.requires_grad:
            self.cache = (q3, k3, v3, mask, lead, probs, drops, q.dtype)
        return out.reshape(lead + (q_len, dv)).astype(q.dtype, copy=False)

    def _block_grads(self, xp: Any, rows: tuple, p: Any, dy3: Any, keep: Any, grads: tuple) -> None:
        """The gradients of leading rows ``rows`` (probabilities ``p``, recomputed when
        None) written into ``grads`` = (dq, dk, dv, dbias or None)."""
        q3, k3, v3, mask, lead = self.cache[:5]
        (i0, i1), (dq, dk, dv, dbias) = rows, grads
        if p is None:
            p = xp.empty((i1 - i0, q3.shape[1], k3.shape[1]), dtype=q3.dtype)
            self._probs_into(xp, p, rows, q3, k3, mask, lead)
        g = dy3[i0:i1]
        xp.matmul(p.transpose(0, 2, 1) if keep is None else (p * keep).transpose(0, 2, 1), g, out=dv[i0:i1])
        dp = g @ v3[i0:i1].transpose(0, 2, 1)
        if keep is not None:
            dp *= keep
        if mask is None and dp.dtype == np.float32 and type(dp) is np.ndarray:
            softmax_rows_grad(dp, p, self.scale, self.is_causal)
        else:
            dp -= (dp * p).sum(axis=-1, keepdims=True)
            dp *= p
            if dbias is not None:
                dbias[i0:i1] = dp
            dp *= self.scale
        xp.matmul(dp, k3[i0:i1], out=dq[i0:i1])
        xp.matmul(dp.transpose(0, 2, 1), q3[i0:i1], out=dk[i0:i1])

    def backward(self, dy):
        xp = array_module(dy)
        q3, k3, v3, mask, lead, probs, drops, in_dt = self.cache
        n, q_len, d = q3.shape
        kv_len = k3.shape[1]
        dt = q3.dtype
        dy3 = dy.reshape(n, q_len, -1).astype(dt, copy=False)
        dq, dk, dv = xp.empty_like(q3), xp.empty_like(k3), xp.empty_like(v3)
        want_mask = (
            mask is not None and not self.mask_is_bool and len(self.needs_grad) > 3 and self.needs_grad[3]
        )
        dbias = xp.empty((n, q_len, kv_len), dtype=dt) if want_mask else None
        for j, (i0, i1) in enumerate(self._blocks(n, q_len, kv_len, np.dtype(dt).itemsize)):
            p = probs[j] if probs else None
            keep = drops[j] if drops else None

            def piece(a: int, b: int, i0: int = i0, p: Any = p, keep: Any = keep) -> None:
                self._block_grads(
                    xp,
                    (i0 + a, i0 + b),
                    None if p is None else p[a:b],
                    dy3,
                    None if keep is None else keep[a:b],
                    (dq, dk, dv, dbias),
                )

            workers.run_pieces(piece, workers.work_pieces(i1 - i0, 3 * (i1 - i0) * q_len * kv_len), xp)
        grads = [
            dq.reshape(lead + (q_len, d)).astype(in_dt, copy=False),
            dk.reshape(lead + (kv_len, d)).astype(in_dt, copy=False),
            dv.reshape(lead + (kv_len, v3.shape[2])).astype(in_dt, copy=False),
        ]
        if mask is not None:
            grads.append(
                None
                if dbias is None
                else unbroadcast(dbias.reshape(lead + (q_len, kv_len)), mask.shape).astype(mask.dtype)
            )
        return tuple(grads)


class MaskedSoftMax(Operation):
    """softmax(x) along ``axis`` over the positions where the boolean ``mask`` (which
    broadcasts to x) is True; masked positions get 0, and so does a row with every
    position masked. Inputs (x, mask); the mask gets no gradient."""

    def __init__(self, axis: int = -1):
        super().__init__()
        self.axis = axis

    def forward(self, x, mask):
        xp = array_module(x)
        dt = compute_dtype(x)
        allowed = xp.broadcast_to(mask, x.shape)
        s = xp.where(allowed, x.astype(dt, copy=False), _lowest(dt))
        s -= s.max(axis=self.axis, keepdims=True)
        xp.exp(s, out=s)
        s *= allowed
        z = s.sum(axis=self.axis, keepdims=True)
        s /= xp.where(z > 0, z, 1)
        if self.requires_grad:
            self.cache = s
        return s.astype(x.dtype, copy=False)

    def backward(self, dy):
        y = self.cache
        g = dy.astype(y.dtype, copy=False) * y
        g -= y * g.sum(axis=self.axis, keepdims=True)
        return g.astype(dy.dtype, copy=False), None


# ----- public functions ----------------------------------------------------------------
def _check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    for name, t in (("query", q), ("key", k), ("value", v)):
        if t.ndim() < 2:
            raise ValueError(
                f"scaled_dot_product_attention: {name} must have at least 2 dims, got shape {t.shape}"
            )
    check_same_dtype("scaled_dot_product_attention", q, k, v, floating=True)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"scaled_dot_product_attention: query and key sizes differ ({q.shape[-1]} vs {k.shape[-1]})"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"scaled_dot_product_attention: key and value lengths differ ({k.shape[-2]} vs {v.shape[-2]})"
        )
    if not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise ValueError(
            "scaled_dot_product_attention: query, key and value need the same leading dims, got "
            f"{q.shape}, {k.shape}, {v.shape}"
        )


def _check_mask(mask: Tensor, q: Tensor, k: Tensor) -> bool:
    """Whether the mask is boolean (else float of q's dtype); ValueError otherwise."""
    want = tuple(q.shape[:-1]) + (k.shape[-2],)
    try:
        ok = np.broadcast_shapes(tuple(mask.shape), want) == want
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            f"scaled_dot_product_attention: attn_mask of shape {mask.shape} does not broadcast to {want}"
        )
    kind = mask.data.dtype.kind
    if kind == "b":
        return True
    if kind != "f":
        raise ValueError(
            f"scaled_dot_product_attention: attn_mask must be boolean or float, got {mask.data.dtype}"
        )
    return False


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """``softmax(query key^T * scale + mask) value`` (PyTorch's
    ``F.scaled_dot_product_attention``): query (..., L, E), key (..., S, E), value
    (..., S, Ev) with the same leading dims (batch, heads); the result is (..., L, Ev).

    ``attn_mask`` broadcasts to (..., L, S): boolean (True: may attend) or float (added
    to the scores, gets a gradient). ``is_causal`` lets query i attend keys 0..i (with a
    mask too, both apply). ``scale`` defaults to 1 / sqrt(E). ``dropout_p`` drops
    attention probabilities (scaling the kept by 1 / (1 - p)) with masks from the
    device's generator, as PyTorch whenever it is > 0. Rows with nothing to attend give 0.
    """
    _check_qkv(query, key, value)
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"scaled_dot_product_attention: dropout_p must be in [0, 1), got {dropout_p}")
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    elif not (isinstance(scale, int | float) and math.isfinite(scale)):
        raise ValueError(f"scaled_dot_product_attention: scale must be a finite number, got {scale!r}")
    if attn_mask is None:
        op = ScaledDotProductAttention(scale, is_causal, dropout_p, False, query.device)
        return op(query, key, value)[0]
    is_bool = _check_mask(attn_mask, query, key)
    if not is_bool and attn_mask.dtype != query.dtype:
        raise ValueError(
            f"scaled_dot_product_attention: a float attn_mask must have the query's dtype {query.dtype}, "
            f"got {attn_mask.dtype}"
        )
    op = ScaledDotProductAttention(scale, is_causal, dropout_p, is_bool, query.device)
    return op(query, key, value, attn_mask)[0]


def masked_softmax(x: Tensor, mask: Tensor | None = None, axis: int = -1) -> Tensor:
    """Softmax of ``x`` along ``axis`` over the positions where the boolean ``mask``
    (broadcasting to x) is True; masked positions, and rows with every position masked,
    give 0. Without a mask it is the softmax."""
    check_same_dtype("masked_softmax", x, floating=True)
    nd = x.ndim()
    if not -nd <= axis < nd:
        raise ValueError(f"masked_softmax: axis {axis} is out of range for x of shape {x.shape}")
    if mask is None:
        mask = Tensor.wrap(array_module(x.data).ones((1,) * nd, dtype=bool), x.device)
    if mask.data.dtype.kind != "b":
        raise ValueError(f"masked_softmax: mask must be boolean, got {mask.data.dtype}")
    try:
        ok = np.broadcast_shapes(tuple(mask.shape), tuple(x.shape)) == tuple(x.shape)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            f"masked_softmax: mask of shape {mask.shape} does not broadcast to x of shape {x.shape}"
        )
    return MaskedSoftMax(axis % nd)(x, mask)[0]
