"""DataLoader: batching, seeded shuffling, drop_last / last smaller batch, normalisation."""

import numpy as np
import pytest

from singa.data import DataLoader, channel_mean_std


def _data(n=10, c=2, h=3, w=3):
    x = np.arange(n * c * h * w, dtype=np.float32).reshape(n, c, h, w) / (n * c * h * w)
    y = np.arange(n, dtype=np.int64) % 3
    return x, y


def test_sequential_batches_and_last_smaller_batch():
    x, y = _data(10)
    dl = DataLoader(x, y, batch_size=4)
    assert len(dl) == 3 and dl.num_samples == 10
    batches = list(dl)
    assert [b[0].shape[0] for b in batches] == [4, 4, 2]
    np.testing.assert_array_equal(np.concatenate([b[0] for b in batches]), x)
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), y)
    for xb, yb in batches:
        assert xb.dtype == np.float32 and yb.dtype == np.int32
        assert not np.shares_memory(xb, x)  # batches are copies


def test_drop_last():
    x, y = _data(10)
    dl = DataLoader(x, y, batch_size=4, drop_last=True)
    assert len(dl) == 2
    batches = list(dl)
    assert [len(b[1]) for b in batches] == [4, 4]
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), y[:8])
    assert len(DataLoader(x, y, batch_size=5, drop_last=True)) == 2  # exact multiple keeps every batch
    assert len(DataLoader(x, y, batch_size=11, drop_last=True)) == 0
    assert list(DataLoader(x, y, batch_size=11, drop_last=True)) == []


def test_shuffle_is_a_permutation_deterministic_per_seed_and_epoch():
    x, y = _data(23)
    ids = np.arange(23)

    def epoch_order(dl):
        return np.concatenate([yb for _, yb in dl])

    a = DataLoader(x, ids, batch_size=5, shuffle=True, seed=7)
    b = DataLoader(x, ids, batch_size=5, shuffle=True, seed=7)
    e0, e1 = epoch_order(a), epoch_order(a)
    assert sorted(e0) == list(ids) and sorted(e1) == list(ids)
    assert not np.array_equal(e0, ids)  # shuffled
    assert not np.array_equal(e0, e1)  # a new order every epoch
    np.testing.assert_array_equal(epoch_order(b), e0)  # same seed, same sequence of epochs
    np.testing.assert_array_equal(epoch_order(b), e1)
    c = DataLoader(x, ids, batch_size=5, shuffle=True, seed=8)
    assert not np.array_equal(epoch_order(c), e0)
    # resuming: set_epoch(1) reproduces epoch 1 without replaying epoch 0
    d = DataLoader(x, ids, batch_size=5, shuffle=True, seed=7)
    d.set_epoch(1)
    np.testing.assert_array_equal(epoch_order(d), e1)
    np.testing.assert_array_equal(a.order(0), e0)
    # x and y stay paired under shuffling
    for xb, yb in DataLoader(x, ids, batch_size=4, shuffle=True, seed=3):
        np.testing.assert_array_equal(xb, x[yb])


def test_unseeded_shuffle_draws_a_seed_that_reproduces_it():
    x, y = _data(30)
    dl = DataLoader(x, np.arange(30), batch_size=30, shuffle=True)
    first = next(iter(dl))[1]
    again = DataLoader(x, np.arange(30), batch_size=30, shuffle=True, seed=dl.seed)
    np.testing.assert_array_equal(next(iter(again))[1], first)


def test_normalisation_per_channel_and_scalar():
    x, y = _data(6, c=3)
    mean, std = [0.1, 0.2, 0.3], [0.5, 2.0, 4.0]
    (xb, _), *_ = DataLoader(x, y, batch_size=6, mean=mean, std=std)
    expect = (x - np.array(mean, np.float32)[None, :, None, None]) / np.array(std, np.float32)[
        None, :, None, None
    ]
    np.testing.assert_allclose(xb, expect, rtol=1e-6, atol=1e-7)
    assert xb.dtype == np.float32
    (xb, _), *_ = DataLoader(x, y, batch_size=6, mean=0.5, std=0.25)
    np.testing.assert_allclose(xb, (x - 0.5) / 0.25, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(x, _data(6, c=3)[0])  # the dataset itself is untouched


def test_normalised_batches_have_zero_mean_unit_std():
    rng = np.random.default_rng(0)
    x = (rng.random((200, 3, 4, 4)) * np.array([1.0, 0.5, 0.2])[None, :, None, None] + 0.1).astype(np.float32)
    mean, std = channel_mean_std(x, chunk=7)
    np.testing.assert_allclose(mean, x.mean(axis=(0, 2, 3)), rtol=1e-5)
    np.testing.assert_allclose(std, x.std(axis=(0, 2, 3)), rtol=1e-4)
    (xb,) = list(DataLoader(x, batch_size=200, mean=mean, std=std))  # y=None yields x only
    np.testing.assert_allclose(xb.mean(axis=(0, 2, 3)), 0, atol=1e-5)
    np.testing.assert_allclose(xb.std(axis=(0, 2, 3)), 1, rtol=1e-4)


def test_argument_errors():
    x, y = _data(5)
    with pytest.raises(ValueError, match="5 samples but 4 labels"):
        DataLoader(x, y[:4])
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        DataLoader(x, y, batch_size=0)
    with pytest.raises(ValueError, match="mean has 3 values for 2 channels"):
        DataLoader(x, y, mean=[0, 0, 0])
    with pytest.raises(ValueError, match="std must be positive"):
        DataLoader(x, y, std=[1.0, 0.0])
    with pytest.raises(ValueError, match="non-empty array"):
        channel_mean_std(np.zeros((0, 3, 2, 2), np.float32))
