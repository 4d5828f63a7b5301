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
#: above it backward recomputes them block by block (the same bits as the forward)
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


class _Heads:
    """The (..., L, E) operands seen as 4-D (A0, A1, L, E) stacks (views when they are
    4-D already, as (batch, heads) are), cut along one leading axis into blocks
    (memory) and pieces (workers), each a rectangular slice."""

    def __init__(self, lead: tuple):
        self.lead = lead
        n = math.prod(lead)
        self.shape = lead if len(lead) == 2 else (1, n)
        # slices along axis 0, or along axis 1 when axis 0 has one row, are contiguous
        # parts of a contiguous array: the compiled kernels then always see one layout
        # (numba compiles strided arrays separately, and sums them in another order)
        self.axis = 0 if self.shape[0] > 1 else 1

    def as4(self, a: Any) -> Any:
        """``a`` (lead + (L, E)) as (A0, A1, L, E); a view when ``a`` is 4-D."""
        return a if a.ndim == 4 else a.reshape(self.shape + a.shape[-2:])

    def empty(self, xp: Any, rows: int, cols: int, dt: Any, heads_inner: bool) -> Any:
        """A new (A0, A1, rows, cols) array; with ``heads_inner`` (4-D operands) a view of
        an (A0, rows, A1, cols) one, the layout that (batch, length, heads, features)
        consumers read without a copy."""
        a0, a1 = self.shape
        if heads_inner:
            return xp.empty((a0, rows, a1, cols), dtype=dt).transpose(0, 2, 1, 3)
        return xp.empty((a0, a1, rows, cols), dtype=dt)

    def take(self, a: Any, i: int, j: int) -> Any:
        """Rows i..j of ``a`` along the cut axis."""
        return a[i:j] if self.axis == 0 else a[:, i:j]

    def blocks(self, q_len: int, kv_len: int, itemsize: int) -> list:
        """Slices along the cut axis whose scores take at most :data:`BLOCK_BYTES`."""
        n, other = self.shape[self.axis], self.shape[1 - self.axis]
        per = max(1, BLOCK_BYTES // max(1, other * q_len * kv_len * itemsize))
        return [(i, min(n, i + per)) for i in range(0, n, per)]

    def back(self, a: Any, tail: tuple) -> Any:
        """A 4-D result back in the operands' leading shape."""
        return a if len(self.lead) == 2 else a.reshape(self.lead + tail)


def _compiled_rows(s: Any, mask: Any) -> bool:
    """Whether the compiled row softmax takes these scores: float32 numpy, no mask."""
    return mask is None and s.dtype == np.float32 and type(s) is np.ndarray


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
    def _bias_block(self, xp: Any, mask4: Any, shape: tuple, dt: Any) -> Any:
        """The additive bias of a slice whose mask is ``mask4`` (None: no mask)."""
        bias = None
        if mask4 is not None:
            bias = xp.where(mask4, 0, -xp.inf).astype(dt) if self.mask_is_bool else mask4.astype(dt)
        if self.is_causal:
            c = xp.where(causal_allowed(xp, *shape), 0, -xp.inf).astype(dt)
            bias = c if bias is None else bias + c
        return bias

    def _drop_mask(self, shape: tuple, dt: Any) -> Any:
        u = self.device.rng.random(shape, dtype=np.float64 if dt == np.float64 else np.float32)
        keep = (u >= self.dropout_p).astype(dt)
        keep *= 1.0 / (1.0 - self.dropout_p)
        return keep

    def _probs_into(self, xp: Any, s: Any, q4: Any, k4: Any, mask4: Any) -> None:
        """The attention probabilities of the slices ``q4``, ``k4`` (and their mask)
        written into ``s``: the compiled row kernel for float32 numpy arrays without a
        mask, else the array expression. The same bits whenever they are computed."""
        xp.matmul(q4, k4.swapaxes(-1, -2), out=s)
        if _compiled_rows(s, mask4):
            softmax_rows(s, self.scale, self.is_causal)
            return
        s *= self.scale
        bias = self._bias_block(xp, mask4, s.shape[2:], s.dtype)
        if bias is not None:
            s += bias
        _softmax_rows(s, xp)

    # ----- forward / backward ----------------------------------------------------------
    def forward(self, q, k, v, mask=None):
        xp = array_module(q)
        dt = compute_dtype(q)
        lead, q_len, kv_len, dv = q.shape[:-2], q.shape[-2], k.shape[-2], v.shape[-1]
        heads = _Heads(lead)
        q4, k4, v4 = (heads.as4(t.astype(dt, copy=False)) for t in (q, k, v))
        mask4 = None if mask is None else heads.as4(xp.broadcast_to(mask, lead + (q_len, kv_len)))
        out = heads.empty(xp, q_len, dv, dt, q.ndim == 4)
        keep_p = self.requires_grad and math.prod(lead) * q_len * kv_len * np.dtype(dt).itemsize <= KEEP_BYTES
        probs, drops = [], []
        for i0, i1 in heads.blocks(q_len, kv_len, np.dtype(dt).itemsize):
            p = xp.empty(heads.take(q4, i0, i1).shape[:2] + (q_len, kv_len), dtype=dt)
            keep = self._drop_mask(p.shape, dt) if self.dropout_p > 0 else None

            def piece(a: int, b: int, i0: int = i0, p: Any = p, keep: Any = keep) -> None:
                rows = (i0 + a, i0 + b)
                pa = heads.take(p, a, b)
                m4 = None if mask4 is None else heads.take(mask4, *rows)
                self._probs_into(xp, pa, heads.take(q4, *rows), heads.take(k4, *rows), m4)
                pd = pa if keep is None else pa * heads.take(keep, a, b)
                xp.matmul(pd, heads.take(v4, *rows), out=heads.take(out, *rows))

            workers.run_pieces(piece, workers.work_pieces(i1 - i0, 2 * p.size), xp)
            if keep is not None:
                drops.append(keep)
            if keep_p:
                probs.append(p)
        if self.requires_grad:
            self.cache = (heads, q4, k4, v4, mask4, mask, probs, drops, q.dtype)
        return heads.back(out, (q_len, dv)).astype(q.dtype, copy=False)

    def _block_grads(self, xp: Any, rows: tuple, p: Any, g: Any, keep: Any, grads: tuple) -> None:
        """The gradients of rows ``rows`` along the cut axis (probabilities ``p``,
        recomputed when None; output gradient ``g``) written into ``grads`` = (dq, dk,
        dv, dbias or None)."""
        heads, q4, k4, v4, mask4 = self.cache[:5]
        q, k, v = (heads.take(t, *rows) for t in (q4, k4, v4))
        m4 = None if mask4 is None else heads.take(mask4, *rows)
        dq, dk, dv, dbias = (None if t is None else heads.take(t, *rows) for t in grads)
        if p is None:
            p = xp.empty(q.shape[:2] + (q.shape[2], k.shape[2]), dtype=q.dtype)
            self._probs_into(xp, p, q, k, m4)
        pd = p if keep is None else p * keep
        xp.matmul(pd.swapaxes(-1, -2), g, out=dv)
        dp = g @ v.swapaxes(-1, -2)
        if keep is not None:
            dp *= keep
        if _compiled_rows(dp, m4):
            softmax_rows_grad(dp, p, self.scale, self.is_causal)
        else:
            dp -= (dp * p).sum(axis=-1, keepdims=True)
            dp *= p
            if dbias is not None:
                dbias[...] = dp
            dp *= self.scale
        xp.matmul(dp, k, out=dq)
        xp.matmul(dp.swapaxes(-1, -2), q, out=dk)

    def backward(self, dy):
        xp = array_module(dy)
        heads, q4, k4, v4, mask4, mask, probs, drops, in_dt = self.cache
        q_len, d, kv_len, dv_len = q4.shape[2], q4.shape[3], k4.shape[2], v4.shape[3]
        dt = q4.dtype
        dy4 = heads.as4(dy.astype(dt, copy=False))
        inner = len(heads.lead) == 2
        dq, dk, dv = (
            heads.empty(xp, n, e, dt, inner) for n, e in ((q_len, d), (kv_len, d), (kv_len, dv_len))
        )
        want_mask = (
            mask is not None and not self.mask_is_bool and len(self.needs_grad) > 3 and self.needs_grad[3]
        )
        dbias = xp.empty(heads.shape + (q_len, kv_len), dtype=dt) if want_mask else None
        for j, (i0, i1) in enumerate(heads.blocks(q_len, kv_len, np.dtype(dt).itemsize)):
            p = probs[j] if probs else None
            keep = drops[j] if drops else None

            def piece(a: int, b: int, i0: int = i0, p: Any = p, keep: Any = keep) -> None:
                rows = (i0 + a, i0 + b)
                self._block_grads(
                    xp,
                    rows,
                    None if p is None else heads.take(p, a, b),
                    heads.take(dy4, *rows),
                    None if keep is None else heads.take(keep, a, b),
                    (dq, dk, dv, dbias),
                )

            work = 3 * (i1 - i0) * heads.shape[1 - heads.axis] * q_len * kv_len
            workers.run_pieces(piece, workers.work_pieces(i1 - i0, work), xp)
        grads = [
            heads.back(dq, (q_len, d)).astype(in_dt, copy=False),
            heads.back(dk, (kv_len, d)).astype(in_dt, copy=False),
            heads.back(dv, (kv_len, dv_len)).astype(in_dt, copy=False),
        ]
        if mask is not None:
            grads.append(
                None
                if dbias is None
                else unbroadcast(heads.back(dbias, (q_len, kv_len)), mask.shape).astype(mask.dtype)
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
