"""Compiled CPU kernels of attention's softmax over float32 score rows, and its gradient;
and the float32 rows of the softmax cross-entropy (the loss and its gradient in one visit).

numpy spends five or six passes over the (rows x keys) scores each way (scale, add the
causal bias, row max, exp, sum, divide; then ``dp * p``, its row sum, subtract,
multiply, scale), each a separate loop with a temporary. These kernels do each row in
one visit while it sits in cache, skip the keys a causal row may not attend (half the
scores), and run over (batch x head) pieces on the workers. The exponential is
:func:`exp_float32`: a polynomial and the exponent's bits, which LLVM vectorises (libm's
``expf`` is one call per element, about 3.5 ns against 0.35).
"""

from __future__ import annotations

import math

import numpy as np

from singa.kernels.jit import helper, kernel

__all__ = ["exp_float32", "softmax_rows", "softmax_rows_grad", "softmax_xent_float32"]

_EXP_LOWEST = -87.0  # below it exp is under float32's smallest normal number: 0


@helper
def exp_float32(a: float) -> float:
    """exp(a) in float32, relative error below 1e-7 (a = k ln 2 + r, exp(r) by a
    degree-6 minimax polynomial (Cephes' expf), 2^k written into the exponent bits); 0
    for a below -87."""
    c = max(a, np.float32(_EXP_LOWEST))
    k = np.floor(c * np.float32(1.4426950408889634) + np.float32(0.5))
    r = c - k * np.float32(0.693359375) + k * np.float32(2.12194440e-4)
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    p = p * r * r + r + np.float32(1.0)
    two_k = np.int32((np.int32(k) + np.int32(127)) << 23).view(np.float32)
    return p * two_k * np.float32(a >= np.float32(_EXP_LOWEST))


@kernel(reassociate=True)
def softmax_rows(s, scale, causal):  # pragma: no cover (compiled)
    """In place over float32 scores ``s`` (n0, n1, L, S): each row becomes
    softmax(scale * row), row i over keys 0..i when ``causal`` (zeros after). A row
    with no finite score becomes zeros."""
    n0, n1, q_len, kv_len = s.shape
    sc = np.float32(scale)
    for b in range(n0):
        for h in range(n1):
            for i in range(q_len):
                stop = min(i + 1, kv_len) if causal else kv_len
                _softmax_row(s[b, h, i], sc, stop)


_ORDER_MASK = 0x7FFFFFFF
_MINUS_INF_KEY = -2139095041  # the order key of -inf (bits 0xFF800000)


@helper
def _order_key(bits):
    """A float32's bits (as int32) turned into an int32 in the floats' order: the lower
    31 bits of a negative float flipped. Its own inverse."""
    return bits ^ ((bits >> np.int32(31)) & np.int32(_ORDER_MASK))


@helper
def _row_max(row, stop):  # pragma: no cover (compiled)
    """The largest of ``row[:stop]`` (-inf when stop is 0). LLVM runs a float max in
    one scalar chain (0.7 ns per element); the same max over the floats' order keys
    (:func:`_order_key`) is an integer max, which it vectorises (0.2 ns)."""
    bits = row.view(np.int32)
    top = np.int32(_MINUS_INF_KEY)
    for j in range(stop):
        top = max(top, _order_key(bits[j]))
    return np.int32(_order_key(top)).view(np.float32)


@helper
def _softmax_row(row, sc, stop):  # pragma: no cover (compiled)
    """softmax(sc * row[:stop]) in place, zeros after."""
    if sc > 0:  # max(sc * x) is sc * max(x), rounded alike
        m = _row_max(row, stop) * sc
    else:
        m = np.float32(-np.inf)
        for j in range(stop):
            v = row[j] * sc
            m = v if v > m else m
    if m == -np.inf:
        stop = 0
    total = np.float32(0.0)
    for j in range(stop):
        e = exp_float32(row[j] * sc - m)
        row[j] = e
        total += e
    inv = np.float32(1.0) / total if stop > 0 else np.float32(0.0)
    for j in range(stop):
        row[j] *= inv
    for j in range(stop, row.shape[0]):
        row[j] = 0.0


@kernel(reassociate=True)
def softmax_rows_grad(dp, p, scale, causal):  # pragma: no cover (compiled)
    """In place: ``dp`` (the gradient of the probabilities ``p``, both (n0, n1, L, S))
    becomes the scores' gradient, scale * p * (dp - sum_j dp p) per row (zero where a
    causal row may not attend)."""
    n0, n1, q_len, kv_len = p.shape
    sc = np.float32(scale)
    for b in range(n0):
        for h in range(n1):
            for i in range(q_len):
                stop = min(i + 1, kv_len) if causal else kv_len
                g, y = dp[b, h, i], p[b, h, i]
                dot = np.float32(0.0)
                for j in range(stop):
                    dot += g[j] * y[j]
                for j in range(stop):
                    g[j] = sc * y[j] * (g[j] - dot)
                for j in range(stop, kv_len):
                    g[j] = 0.0


@kernel(reassociate=True)
def softmax_xent_float32(x, idx, scale, g):  # pragma: no cover (compiled)
    """g = (softmax(x) - onehot(idx)) * scale by rows of the C-ordered float32 ``x`` (N,
    C); returns (sum over rows of -log softmax(x)[row, idx[row]], whether an index lies
    outside [0, C)). The exponentials and their row sum in float32 (vectorised: libm's
    exp took 7 ns an element on gpt's (2048, 65) scores), the loss's logarithm in
    float64 from the row sum and max, so a tiny probability still gives a finite loss."""
    total = 0.0
    sc = np.float32(scale)
    for i in range(x.shape[0]):
        k = idx[i]
        if k < 0 or k >= x.shape[1]:
            return 0.0, True
        top = _row_max(x[i], x.shape[1])
        s = np.float32(0.0)
        for j in range(x.shape[1]):
            e = exp_float32(x[i, j] - top)
            g[i, j] = e
            s += e
        inv = sc / s
        for j in range(x.shape[1]):
            g[i, j] *= inv
        g[i, k] -= sc
        total += math.log(float(s)) - (float(x[i, k]) - float(top))
    return total, False
