"""Attention: scaled_dot_product_attention and masked_softmax against a numpy twin (and
PyTorch where it is installed), float64 gradient checks, blockwise recomputation,
dropout and argument errors."""

import numpy as np
import pytest

from singa import autograd, device
from singa.autograd import attention
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor

rng = np.random.default_rng(0)


def const(a):
    a = np.asarray(a)
    return Tensor(data=a, dtype=a.dtype, requires_grad=False)


def leaf(a):
    a = np.asarray(a)
    return Tensor(data=a.copy(), dtype=a.dtype, requires_grad=True, stores_grad=True)


def sdpa_ref(q, k, v, mask=None, causal=False, scale=None):
    """The numpy twin: the formula, with rows that attend nothing giving 0."""
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * scale
    allowed = np.ones(s.shape, bool)
    if mask is not None and mask.dtype == bool:
        allowed &= np.broadcast_to(mask, s.shape)
    elif mask is not None:
        s = s + mask
    if causal:
        allowed &= np.tril(np.ones(s.shape[-2:], bool))
    allowed &= ~np.isneginf(s)
    s = np.where(allowed, s, -np.inf)
    m = np.max(np.where(allowed, s, -1e300), axis=-1, keepdims=True)
    e = np.where(allowed, np.exp(s - m), 0.0)
    z = e.sum(-1, keepdims=True)
    p = e / np.where(z > 0, z, 1)
    return p @ v


def qkv(b=2, h=3, lq=4, lk=5, d=6, dv=7, dtype=np.float64):
    return (
        rng.standard_normal((b, h, lq, d)).astype(dtype),
        rng.standard_normal((b, h, lk, d)).astype(dtype),
        rng.standard_normal((b, h, lk, dv)).astype(dtype),
    )


def run(q, k, v, mask=None, **kw):
    m = None if mask is None else const(mask)
    return autograd.scaled_dot_product_attention(const(q), const(k), const(v), m, **kw).to_numpy()


def test_forward_plain_and_scale():
    q, k, v = qkv()
    np.testing.assert_allclose(run(q, k, v), sdpa_ref(q, k, v), rtol=1e-12)
    np.testing.assert_allclose(run(q, k, v, scale=0.3), sdpa_ref(q, k, v, scale=0.3), rtol=1e-12)


def test_forward_formula_on_one_head():
    q, k, v = rng.standard_normal((3, 2)), rng.standard_normal((4, 2)), rng.standard_normal((4, 1))
    s = np.array([[q[i] @ k[j] / np.sqrt(2) for j in range(4)] for i in range(3)])
    w = np.exp(s) / np.exp(s).sum(1, keepdims=True)
    np.testing.assert_allclose(run(q, k, v), w @ v, rtol=1e-12)


@pytest.mark.parametrize("shape", [(4, 5), (2, 1, 4, 5), (2, 3, 1, 5), (1, 1, 1, 5)])
def test_forward_boolean_masks_broadcast(shape):
    q, k, v = qkv()
    mask = rng.random(shape) > 0.3
    np.testing.assert_allclose(run(q, k, v, mask), sdpa_ref(q, k, v, mask), rtol=1e-12)


def test_forward_float_mask_causal_and_both():
    q, k, v = qkv(lq=5, lk=5)
    fm = rng.standard_normal((5, 5))
    np.testing.assert_allclose(run(q, k, v, fm), sdpa_ref(q, k, v, fm), rtol=1e-12)
    np.testing.assert_allclose(run(q, k, v, is_causal=True), sdpa_ref(q, k, v, causal=True), rtol=1e-12)
    bm = rng.random((2, 1, 5, 5)) > 0.2
    got = run(q, k, v, bm, is_causal=True)
    np.testing.assert_allclose(got, sdpa_ref(q, k, v, bm, causal=True), rtol=1e-12)


def test_causal_means_query_i_sees_keys_up_to_i():
    q, k, v = qkv(b=1, h=1, lq=4, lk=4, dv=4)
    y = run(q, k, v, is_causal=True)
    np.testing.assert_allclose(y[0, 0, 0], v[0, 0, 0], rtol=1e-12)  # the first query sees key 0 only
    v2 = v.copy()
    v2[0, 0, 3] += 100.0  # the last key changes only the last query's output
    y2 = run(q, k, v2, is_causal=True)
    np.testing.assert_array_equal(y2[0, 0, :3], y[0, 0, :3])
    assert not np.allclose(y2[0, 0, 3], y[0, 0, 3])


def test_rows_with_nothing_to_attend_are_zero():
    q, k, v = qkv(b=1, h=1, lq=3, lk=4)
    mask = np.ones((3, 4), bool)
    mask[1] = False
    y = run(q, k, v, mask)
    np.testing.assert_array_equal(y[0, 0, 1], 0.0)
    assert np.isfinite(y).all()
    fm = np.zeros((3, 4))
    fm[2] = -np.inf
    y = run(q, k, v, fm)
    np.testing.assert_array_equal(y[0, 0, 2], 0.0)


def test_matches_torch():
    try:
        import torch
        import torch.nn.functional as F
    except Exception:
        pytest.skip("torch is not importable")
    q, k, v = qkv(lq=5, lk=5, dtype=np.float32)
    bm = rng.random((2, 1, 5, 5)) > 0.3
    fm = rng.standard_normal((5, 5)).astype(np.float32)
    for mask, causal in ((None, False), (bm, False), (fm, False), (None, True)):
        tm = None if mask is None else torch.from_numpy(mask)
        want = F.scaled_dot_product_attention(
            *map(torch.from_numpy, (q, k, v)), attn_mask=tm, is_causal=causal
        )
        np.testing.assert_allclose(run(q, k, v, mask, is_causal=causal), want.numpy(), rtol=1e-5, atol=1e-6)


def test_gradcheck_plain_causal_and_masks():
    q, k, v = qkv(b=1, h=2, lq=3, lk=3, d=2, dv=2)
    gradcheck(lambda a, b, c: autograd.scaled_dot_product_attention(a, b, c), [q, k, v])
    gradcheck(
        lambda a, b, c: autograd.scaled_dot_product_attention(a, b, c, is_causal=True, scale=0.7), [q, k, v]
    )
    bm = np.array([[True, False, True], [False, False, False], [True, True, False]])
    gradcheck(lambda a, b, c, m: autograd.scaled_dot_product_attention(a, b, c, m), [q, k, v, bm])
    fm = rng.standard_normal((2, 1, 3))
    gradcheck(lambda a, b, c, m: autograd.scaled_dot_product_attention(a, b, c, m), [q, k, v, fm])


def test_recomputed_blocks_match_kept_probabilities(monkeypatch):
    q, k, v = qkv(b=2, h=2, lq=3, lk=4, d=2, dv=2)
    fm = rng.standard_normal((2, 1, 3, 4))

    def grads():
        ts = [leaf(a) for a in (q, k, v, fm)]
        y = autograd.scaled_dot_product_attention(*ts, is_causal=True)
        g = autograd.gradients(y, dy=np.linspace(-1, 1, y.size()).reshape(y.shape))
        return y.to_numpy(), [g[t].to_numpy() for t in ts]

    y0, g0 = grads()
    monkeypatch.setattr(attention, "BLOCK_BYTES", 3 * 4 * 8)  # one (batch, head) per block
    monkeypatch.setattr(attention, "KEEP_BYTES", 0)  # recompute in backward
    y1, g1 = grads()
    np.testing.assert_array_equal(y1, y0)  # blocks are computed alone: the same bits
    for a, b in zip(g0, g1):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    gradcheck(
        lambda a, b, c, m: autograd.scaled_dot_product_attention(a, b, c, m, is_causal=True), [q, k, v, fm]
    )


def test_dropout_uses_the_device_generator():
    q, k, v = qkv(b=1, h=2, lq=4, lk=4, d=3, dv=3)
    dev = device.get_default_device()
    dev.set_rand_seed(7)
    y1 = run(q, k, v, dropout_p=0.5)
    dev.set_rand_seed(7)
    y2 = run(q, k, v, dropout_p=0.5)
    np.testing.assert_array_equal(y1, y2)
    assert not np.allclose(y1, run(q, k, v))
    dev.set_rand_seed(7)  # the twin: the same draw, applied to the probabilities
    keep = (dev.rng.random((2, 4, 4)) >= 0.5) / 0.5
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(3)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(y1, (p * keep[None]) @ v, rtol=1e-12)


def test_float16_computes_scores_in_float32():
    q, k, v = qkv(dtype=np.float32)
    q16, k16, v16 = (a.astype(np.float16) for a in (q, k, v))
    y = run(q16, k16, v16)
    assert y.dtype == np.float16
    ref = sdpa_ref(*(a.astype(np.float64) for a in (q16, k16, v16)))
    np.testing.assert_allclose(y, ref, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"k": (2, 3, 5, 4)}, "query and key sizes"),
        ({"v": (2, 3, 6, 7)}, "key and value lengths"),
        ({"k": (1, 3, 5, 6), "v": (1, 3, 5, 7)}, "same leading dims"),
        ({"mask": np.ones((3, 5), bool)}, "does not broadcast"),
        ({"mask": np.ones((4, 5), np.int64)}, "boolean or float"),
        ({"mask": np.ones((4, 5), np.float32)}, "query's dtype"),
        ({"dropout_p": 1.0}, "dropout_p"),
        ({"scale": float("nan")}, "scale"),
    ],
)
def test_argument_errors(kwargs, match):
    q, k, v = qkv()
    k = rng.standard_normal(kwargs.pop("k")) if "k" in kwargs else k
    v = rng.standard_normal(kwargs.pop("v")) if "v" in kwargs else v
    mask = kwargs.pop("mask", None)
    with pytest.raises(ValueError, match=match):
        run(q, k, v, mask, **kwargs)


# ----- masked_softmax --------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_masked_softmax_forward(axis):
    x = rng.standard_normal((3, 4, 5))
    mask = rng.random((3, 4, 5)) > 0.3
    mask[0, 0, :] = False
    mask[0, :, 0] = False
    mask[:, 0, 0] = False
    y = autograd.masked_softmax(const(x), const(mask), axis).to_numpy()
    with np.errstate(over="ignore"):
        e = np.where(mask, np.exp(x - np.where(mask, x, -np.inf).max(axis, keepdims=True, initial=-1e300)), 0)
    z = e.sum(axis, keepdims=True)
    np.testing.assert_allclose(y, e / np.where(z > 0, z, 1), rtol=1e-12)
    assert np.isfinite(y).all()
    plain = autograd.masked_softmax(const(x), None, axis).to_numpy()
    np.testing.assert_allclose(plain, autograd.softmax(const(x), axis).to_numpy(), rtol=1e-12)


def test_masked_softmax_gradcheck_and_errors():
    x = rng.standard_normal((2, 3, 4))
    mask = rng.random((1, 3, 4)) > 0.4
    gradcheck(lambda a, m: autograd.masked_softmax(a, m, 1), [x, mask])
    gradcheck(lambda a, m: autograd.masked_softmax(a, m, -1), [x, mask])
    with pytest.raises(ValueError, match="out of range"):
        autograd.masked_softmax(const(x), const(mask), 3)
    with pytest.raises(ValueError, match="boolean"):
        autograd.masked_softmax(const(x), const(mask.astype(np.float64)))
    with pytest.raises(ValueError, match="does not broadcast"):
        autograd.masked_softmax(const(x), const(np.ones((2, 2), bool)))


def test_mixed_precision_keeps_scores_and_softmax_in_float32(monkeypatch):
    from singa.model import precision

    seen = []
    real, real_kernel = attention._softmax_rows, attention.softmax_rows

    def spy(s, xp):
        seen.append(s.dtype)
        return real(s, xp)

    def spy_kernel(s, *args):  # float32 rows without a mask: the compiled softmax
        seen.append(s.dtype)
        return real_kernel(s, *args)

    monkeypatch.setattr(attention, "_softmax_rows", spy)
    monkeypatch.setattr(attention, "softmax_rows", spy_kernel)
    q, k, v = (const(a.astype(np.float16)) for a in qkv(dtype=np.float32))
    with precision.autocast("mixed"):
        y = autograd.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert seen == [np.float32] and y.dtype == np.float16
    assert attention.ScaledDotProductAttention in precision.FLOAT32_OPERATIONS
