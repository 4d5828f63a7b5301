"""DataLoader.state_dict / load_state_dict: a resumed loader yields exactly the batches
an uninterrupted one would have yielded next."""

from __future__ import annotations

import json

import numpy as np
import pytest

from singa import data


def _ids(loader, n=None):
    out = []
    for k, (_, yb) in enumerate(loader):
        if n is not None and k >= n:
            break
        out.append(yb.tolist())
    return out


def _loader(**kw):
    x = np.zeros((22, 1), np.float32)
    return data.DataLoader(x, np.arange(22), batch_size=4, shuffle=True, seed=9, **kw)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("stop_after", [0, 1, 3, 6])
def test_resumed_loader_yields_the_remaining_batches(workers, stop_after):
    full = _loader()
    epochs = [_ids(full) for _ in range(3)]
    first = _loader()
    _ids(first)  # epoch 0
    it = iter(first)
    taken = [next(it)[1].tolist() for _ in range(stop_after)]
    state = json.loads(json.dumps(first.state_dict()))  # JSON values only
    assert state["epoch"] == (2 if stop_after == 6 else 1)
    assert state["batch"] == (0 if stop_after == 6 else stop_after)
    with _loader(workers=workers) as resumed:
        resumed.seed = 123  # the state's seed wins
        resumed.load_state_dict(state)
        assert resumed.state_dict()["batch"] == state["batch"]
        rest = _ids(resumed)
        after = _ids(resumed)
    if stop_after == 6:  # the state was taken at the end of epoch 1
        assert taken == epochs[1] and rest == epochs[2]
    else:
        assert taken + rest == epochs[1]
        assert after == epochs[2]


def test_state_before_any_iteration_and_after_set_epoch():
    loader = _loader()
    assert loader.state_dict()["epoch"] == 0 and loader.state_dict()["batch"] == 0
    loader.set_epoch(4)
    assert loader.state_dict()["epoch"] == 4 and loader.state_dict()["batch"] == 0


def test_a_state_that_does_not_fit_is_refused_and_changes_nothing():
    loader = _loader()
    state = loader.state_dict()
    other = data.DataLoader(np.zeros((30, 1)), np.arange(30), batch_size=4, shuffle=True, seed=1)
    with pytest.raises(ValueError, match="num_samples 22"):
        other.load_state_dict(state)
    assert other.seed == 1 and other.epoch == 0
    with pytest.raises(ValueError, match="batch_size 4"):
        data.DataLoader(np.zeros((22, 1)), np.arange(22), batch_size=5, shuffle=True).load_state_dict(state)
    with pytest.raises(ValueError, match="not a loader state"):
        loader.load_state_dict({"epoch": 1})
    with pytest.raises(ValueError, match="out of range"):
        loader.load_state_dict({**state, "batch": 99})
