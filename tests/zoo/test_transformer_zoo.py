"""The zoo's transformers: gpt (cached generation equals full recomputation, seeded
sampling, weight tying, it learns, graph == eager bitwise) and vit (shapes, patch
sizes, graph == eager bitwise, it learns)."""

import numpy as np
import pytest

from singa import autograd, device, opt, zoo
from singa.tensor import Tensor
from singa.zoo import gpt_cache


def small_gpt(**kw):
    args = {"num_classes": 11, "num_layers": 2, "num_heads": 2, "width": 16, "context": 12} | kw
    return zoo.create("gpt", **args)


def test_cached_steps_give_the_logits_of_full_recomputation():
    device.get_default_device().set_rand_seed(0)
    m = small_gpt()
    m.eval()
    ids = np.random.default_rng(0).integers(0, 11, (2, 12))
    with autograd.no_grad():
        logits, caches = gpt_cache.prefill(m, ids[:, :4])
        for t in range(4, 12):
            full, _ = gpt_cache.prefill(m, ids[:, : t + 1])
            logits, caches = gpt_cache.step(m, ids[:, t], t, caches)
            np.testing.assert_allclose(logits, full, rtol=1e-4, atol=1e-5)
            assert caches[0][0].shape == (2, 2, t + 1, 8)  # one more position per step


def test_generation_is_seeded_and_matches_the_cache_less_loop():
    device.get_default_device().set_rand_seed(1)
    m = small_gpt()
    a = m.generate([1, 2, 3], 8, temperature=0.9, top_k=5, seed=3)
    b = m.generate([1, 2, 3], 8, temperature=0.9, top_k=5, seed=3)
    c = m.generate([1, 2, 3], 8, temperature=0.9, top_k=5, seed=3, use_cache=False)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)  # within the context both give the same logits
    assert a.shape == (1, 11) and list(a[0, :3]) == [1, 2, 3]
    long = m.generate([[1, 2], [3, 4]], 30, temperature=0.0)  # beyond the context of 12
    assert long.shape == (2, 32) and long.max() < 11
    assert m.training  # the mode comes back


def test_sampling_rules():
    logits = np.log(np.array([[0.1, 0.2, 0.3, 0.4]]))
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(gpt_cache.sample(logits, 0.0, None, rng), [3])
    draws = np.array([gpt_cache.sample(logits, 1.0, 2, rng)[0] for _ in range(400)])
    assert set(draws) == {2, 3}  # top-2 only
    assert 0.35 < (draws == 2).mean() < 0.5  # 0.3 / 0.7 = 0.43


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"prompt": [[]]}, "non-empty"),
        ({"prompt": [11]}, r"in \[0, 11\)"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"temperature": -1.0}, "temperature"),
        ({"top_k": 0}, "top_k"),
    ],
)
def test_generate_errors(kwargs, match):
    args = {"prompt": [1], "max_tokens": 2} | kwargs
    with pytest.raises(ValueError, match=match):
        small_gpt().generate(**args)


def _lm_batches(n, b=4, t=12, seed=0):
    text = np.tile(np.arange(11), 40)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        starts = rng.integers(0, len(text) - t - 1, b)
        x = np.stack([text[s : s + t] for s in starts])
        y = np.stack([text[s + 1 : s + t + 1] for s in starts])
        out.append((x, y))
    return out


def _train_gpt(data, use_graph):
    device.get_default_device().set_rand_seed(5)
    m = small_gpt(dropout=0.1)
    m.set_optimizer(opt.AdamW(1e-2))
    tx = Tensor(data[0][0].shape, dtype=np.int64, requires_grad=False)
    ty = Tensor(data[0][1].shape, dtype=np.int64, requires_grad=False)
    m.compile([tx], is_train=True, use_graph=use_graph)
    losses = []
    for x, y in data:
        tx.copy_from_numpy(x)
        ty.copy_from_numpy(y)
        _, loss = m(tx, ty)
        losses.append(float(loss.to_numpy().reshape(-1)[0]))
    return losses, {k: v.to_numpy() for k, v in m.get_states().items()}


def test_gpt_learns_and_graph_is_bitwise_eager():
    data = _lm_batches(30)
    eager, s1 = _train_gpt(data, False)
    graph, s2 = _train_gpt(data, True)
    assert eager == graph
    for k in s1:
        np.testing.assert_array_equal(s1[k], s2[k], err_msg=k)
    assert np.mean(eager[-5:]) < 0.5 * np.mean(eager[:5])  # a repeating sequence is learnt
    assert "tok_emb.W" in s1 and not [k for k in s1 if "head" in k]  # the output layer is the embedding


def test_gpt_rejects_bad_tokens():
    m = small_gpt()
    m.eval()
    with pytest.raises(ValueError, match="longer than the context"):
        m(Tensor(data=np.zeros((1, 13), np.int64), dtype=np.int64, requires_grad=False))
    with pytest.raises(ValueError, match="integer token ids"):
        m(Tensor(data=np.zeros((1, 4), np.float32)))


def test_vit_patch_sizes_and_shapes():
    for hw, p in (((28, 28), 7), ((32, 32), 4), ((16, 16), 4)):
        v = zoo.create(
            "vit", num_classes=3, num_channels=2, image_size=hw, num_layers=1, width=8, num_heads=2
        )
        v.eval()
        x = Tensor(data=np.random.default_rng(0).random((2, 2) + hw).astype(np.float32))
        assert v(x).shape == (2, 3) and v.patch_size == p


def test_vit_learns_and_graph_is_bitwise_eager():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 32)
    x = rng.standard_normal((32, 1, 8, 8)).astype(np.float32) * 0.3
    x[y == 1, :, :4] += 1.0  # class 1: a bright top half

    def train(use_graph):
        device.get_default_device().set_rand_seed(2)
        v = zoo.create(
            "vit", num_classes=2, num_channels=1, image_size=8, num_layers=2, width=16, num_heads=2
        )
        v.set_optimizer(opt.Adam(3e-3))
        tx, ty = Tensor(data=x[:16]), Tensor(data=y[:16].astype(np.int32), requires_grad=False)
        v.compile([tx], is_train=True, use_graph=use_graph)
        losses = []
        for i in range(20):
            s = slice(16 * (i % 2), 16 * (i % 2) + 16)
            tx.copy_from_numpy(x[s])
            ty.copy_from_numpy(y[s].astype(np.int32))
            losses.append(float(v(tx, ty)[1].to_numpy().reshape(-1)[0]))
        return losses

    eager, graph = train(False), train(True)
    assert eager == graph
    assert np.mean(eager[-4:]) < 0.5 * np.mean(eager[:4])


def test_gpt_bits_do_not_depend_on_the_worker_count():
    """Large enough that every kernel cuts its work into pieces (products in blocks,
    attention over (batch, head) pieces, layer norm rows, GELU): one worker and two
    give the same bits after two AdamW steps."""
    from singa.kernels import workers

    rng = np.random.default_rng(3)
    x = rng.integers(0, 50, size=(32, 128))
    y = np.roll(x, -1, axis=1)
    states = []
    try:
        for count in (1, 2):
            workers.set_worker_count(count)
            device.get_default_device().set_rand_seed(5)
            m = zoo.create("gpt", num_classes=50, num_layers=1, num_heads=4, width=64, context=128)
            m.set_optimizer(opt.AdamW(1e-2))
            tx = Tensor(data=x, dtype=np.int64, requires_grad=False)
            ty = Tensor(data=y, dtype=np.int64, requires_grad=False)
            m.compile([tx], is_train=True, use_graph=False)
            for _ in range(2):
                m(tx, ty)
            states.append({k: v.to_numpy() for k, v in m.get_states().items()})
    finally:
        workers.set_worker_count(None)
    for k in states[0]:
        np.testing.assert_array_equal(states[0][k], states[1][k], err_msg=k)
