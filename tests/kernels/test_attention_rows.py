"""The compiled attention softmax (singa.kernels.attention_rows) against numpy in float64,
the float32 attention operator that uses it against the float64 one (the array
expression, float64 gradient checks in tests/autograd/test_attention.py), and its bits
against the worker count."""

import math

import numpy as np
import pytest

from singa import autograd
from singa.autograd import attention
from singa.kernels import workers
from singa.kernels.attention_rows import exp_float32, softmax_rows, softmax_rows_grad, softmax_xent_float32
from singa.tensor import Tensor


def softmax_ref(s, scale, causal):
    s = s.astype(np.float64) * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.exp(s - m)
    z = e.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(z > 0, e / z, 0)


@pytest.mark.parametrize("shape", [(3, 5, 7), (2, 9, 4), (4, 33, 33)])
@pytest.mark.parametrize("causal", [False, True])
def test_softmax_rows_against_numpy(shape, causal):
    rng = np.random.default_rng(0)
    s = (rng.standard_normal(shape) * 6).astype(np.float32)
    s[0, 1] = -np.inf  # a row with nothing to attend gives zeros
    s[1, 0, 0] = -np.inf
    want = softmax_ref(s, 0.3, causal)
    got = s.copy()
    softmax_rows(got[None], 0.3, causal)  # the kernels take (A0, A1, L, S)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
    assert (got[0, 1] == 0).all() and np.isfinite(got).all()
    dp = rng.standard_normal(shape).astype(np.float32)
    want_ds = 0.3 * want * (dp - (dp * want).sum(axis=-1, keepdims=True))
    softmax_rows_grad(dp[None], got[None], 0.3, causal)
    np.testing.assert_allclose(dp, want_ds, rtol=1e-5, atol=1e-6)
    if causal:
        above = np.triu_indices(shape[1], 1, shape[2])
        assert (dp[:, above[0], above[1]] == 0).all()


def test_exp_float32_against_libm():
    """Relative error below 2e-7 from -87 to 88 (plain Python), 0 below -87."""
    for a in np.linspace(-87, 88, 5001).astype(np.float32):
        got = float(exp_float32(a))
        assert abs(got / math.exp(float(a)) - 1) < 2e-7, a
    assert float(exp_float32(np.float32(-87.5))) == 0.0 and float(exp_float32(np.float32(-np.inf))) == 0.0


def sdpa(q, k, v, causal, dy):
    ts = [Tensor(data=a.copy(), dtype=a.dtype, requires_grad=True, stores_grad=True) for a in (q, k, v)]
    y = autograd.scaled_dot_product_attention(*ts, is_causal=causal)
    g = autograd.gradients(y, dy=dy)
    return [y.to_numpy()] + [g[t].to_numpy() for t in ts]


@pytest.mark.parametrize("lq, lk", [(16, 16), (12, 20), (20, 12)])
@pytest.mark.parametrize("causal", [False, True])
def test_float32_operator_equals_float64(lq, lk, causal):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 3, n, 8)) for n in (lq, lk, lk))
    dy = rng.standard_normal((2, 3, lq, 8))
    got = sdpa(*(a.astype(np.float32) for a in (q, k, v)), causal, dy.astype(np.float32))
    want = sdpa(q, k, v, causal, dy)
    for g, w in zip(got, want):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-5 * np.abs(w).max())


@pytest.mark.parametrize("shape", [(4, 8, 128, 16), (32, 128, 16), (1, 32, 128, 16)])
def test_bits_do_not_depend_on_the_worker_count_or_on_recomputing(monkeypatch, shape):
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    dy = rng.standard_normal(q.shape).astype(np.float32)
    assert len(workers.work_pieces(32, 2 * 32 * 128 * 128)) > 1
    outs = []
    try:
        for count in (1, 2):
            workers.set_worker_count(count)
            outs.append(sdpa(q, k, v, True, dy))
        monkeypatch.setattr(attention, "KEEP_BYTES", 0)  # probabilities recomputed in backward
        outs.append(sdpa(q, k, v, True, dy))
    finally:
        workers.set_worker_count(None)
    for other in outs[1:]:
        for a, b in zip(outs[0], other):
            np.testing.assert_array_equal(a, b)


def xent_ref(x, idx, scale):
    """The loss sum and the gradient (softmax - onehot) * scale in float64."""
    x = x.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    e = np.exp(x - m)
    z = e.sum(axis=1, keepdims=True)
    rows = np.arange(len(x))
    loss = (np.log(z[:, 0]) - (x[rows, idx] - m[:, 0])).sum()
    g = e / z
    g[rows, idx] -= 1
    return loss, g * scale


@pytest.mark.parametrize("shape", [(2048, 65), (64, 10), (5, 1), (3, 1000)])
def test_softmax_xent_float32_against_float64(shape):
    rng = np.random.default_rng(shape[1])
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    if shape[1] > 1:
        x[0, 0] = -np.inf  # a class the row excludes: probability 0
    x[-1, -1] = 60.0  # the others' probabilities underflow in float32
    idx = rng.integers(0, shape[1], shape[0])
    idx[-1] = 0
    g = np.empty_like(x)
    total, bad = softmax_xent_float32(x, idx, 1.0 / shape[0], g)
    want, want_g = xent_ref(x, idx, 1.0 / shape[0])
    assert not bad and math.isfinite(total) and g.dtype == np.float32
    assert abs(total - want) <= 1e-6 * abs(want) + 1e-6
    # p - 1 cancels in float32 (as in PyTorch): a few ulps of 1, times the scale
    np.testing.assert_allclose(g, want_g, rtol=2e-6, atol=4e-7 / shape[0])


def test_softmax_xent_float32_flags_an_index_out_of_range():
    x = np.zeros((3, 4), np.float32)
    for k in (-1, 4):
        assert softmax_xent_float32(x, np.array([0, k, 1]), 1.0, np.empty_like(x))[1]
