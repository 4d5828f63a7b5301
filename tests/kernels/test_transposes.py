"""kernels.transposes: tiled copies of transposed arrays equal numpy's copies."""

import numpy as np
import pytest

from singa.kernels import transposes, workers


def _copied(view):
    """``view`` copied by :func:`transposes.copy_into` into a new C-ordered array."""
    out = np.empty(view.shape, view.dtype)
    transposes.copy_into(view, out)
    return out


def _views(rng):
    w = rng.standard_normal((40, 24, 3, 3)).astype(np.float32)
    g = rng.standard_normal((24, 3, 3, 40)).astype(np.float64)
    m = rng.standard_normal((300, 200)).astype(np.float32)
    return {
        "filters, channels last": w.transpose(2, 3, 1, 0),
        "forward filters": w.transpose(0, 2, 3, 1),
        "flipped filters": w[:, :, ::-1, ::-1].transpose(2, 3, 0, 1),
        "taps first": w.transpose(2, 3, 0, 1),
        "gradient back (short last axis)": g[:, ::-1, ::-1].transpose(3, 0, 1, 2),
        "matrix": m.T,
        "3-d": m.reshape(300, 10, 20).transpose(2, 1, 0),
        "sliced": m[::2, 1::3].T,
    }


@pytest.mark.parametrize("name", list(_views(np.random.default_rng(0))))
def test_copy_into_equals_numpy(name, monkeypatch):
    """Every view comes back as numpy's C-ordered copy (tiles forced on, with a tile
    smaller than the axes so partial tiles are covered too)."""
    monkeypatch.setattr(transposes, "MIN_SIZE", 1)
    monkeypatch.setattr(transposes, "TILE", 7)
    view = _views(np.random.default_rng(1))[name]
    got = _copied(view)
    np.testing.assert_array_equal(got, np.ascontiguousarray(view))
    assert got.dtype == view.dtype


def test_tiles_are_used_only_where_they_pay(monkeypatch):
    """The tiled kernel runs for large float views whose contiguous axis is not the last
    and whose last axis is at least a tile long; everything else is numpy's copy."""
    calls = []
    real = transposes._copy_tiles
    monkeypatch.setattr(transposes, "_copy_tiles", lambda s, o, t: (calls.append(s.shape), real(s, o, t)))
    w = np.ones((256, 256, 3, 3), np.float32)
    _copied(w.transpose(2, 3, 1, 0))  # (3, 3, C, O) from (O, C, 3, 3)
    # C outermost (the largest stride), in pieces; then kh, kw (contiguous), O
    assert calls and all(shape[1:] == (3, 3, 256) for shape in calls)
    assert sum(shape[0] for shape in calls) == 256
    calls.clear()
    _copied(np.ones((64, 64, 3, 3), np.float32).transpose(2, 3, 1, 0))  # below MIN_SIZE
    _copied(np.ones((256, 3, 3, 256), np.float32).transpose(3, 0, 1, 2))  # last axis 3
    _copied(np.ones((8, 8), np.float32).T)  # small
    _copied(np.ones((800, 800), np.int64).T)  # not float
    _copied(np.ones((800, 800), np.float32))  # already C-ordered
    assert calls == []


def test_pieces_on_the_workers_give_the_same_copy(monkeypatch, pieces_seen):
    """A large copy is cut along its outermost axis into pieces on the workers; one
    worker or two, the result is numpy's copy."""
    monkeypatch.setattr(transposes, "MIN_SIZE", 1)
    monkeypatch.setattr(workers, "PIECE_WORK", 64)
    view = np.random.default_rng(2).standard_normal((24, 20, 3, 3)).astype(np.float32).transpose(2, 3, 1, 0)
    before = workers.worker_count()
    try:
        for count in (1, 2):
            workers.set_worker_count(count)
            np.testing.assert_array_equal(_copied(view), np.ascontiguousarray(view))
    finally:
        workers.set_worker_count(before)
    assert pieces_seen and min(len(p) for p in pieces_seen) > 1
