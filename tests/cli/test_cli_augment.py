"""singa-train --augment: random crop + flip of image batches through DataLoader's transform."""

from __future__ import annotations

import numpy as np
from cli_helpers import TINY, assert_same_arrays, run_state

import singa.cli.trainer
from singa import data, image_tool


def test_augment_changes_training_and_is_repeatable(run, tmp_path):
    r = run(*TINY, "--max-steps", "3", "--augment", "--checkpoint", "a.zip")
    assert r.exit_code == 0, r.output + r.stderr
    assert ", augmented," in r.stdout.splitlines()[1]
    assert run_state(tmp_path / "a.zip")["config"]["augment"] is True
    assert run(*TINY, "--max-steps", "3", "--augment", "--checkpoint", "b.zip").exit_code == 0
    assert_same_arrays(tmp_path / "a.zip", tmp_path / "b.zip")  # same seed, same augmentations
    assert run(*TINY, "--max-steps", "3", "--checkpoint", "c.zip").exit_code == 0
    a = np.concatenate([v.ravel() for v in _arrays(tmp_path / "a.zip")])
    c = np.concatenate([v.ravel() for v in _arrays(tmp_path / "c.zip")])
    assert not np.array_equal(a, c)


def _arrays(path):
    from singa import checkpoint

    arrays = checkpoint.read_arrays(str(path))
    return [arrays[k] for k in sorted(arrays)]


def test_augment_passes_image_tools_function_to_the_loader(run, monkeypatch):
    seen = {}
    real = data.DataLoader

    def spy(*args, **kw):
        loader = real(*args, **kw)
        seen.setdefault("transforms", []).append(loader.transform)
        return loader

    monkeypatch.setattr(singa.cli.trainer.data, "DataLoader", spy)
    assert run(*TINY, "--max-steps", "1", "--augment").exit_code == 0
    assert seen["transforms"] == [image_tool.augment_batch, None]  # training batches only


def test_loader_transform_gets_a_generator_per_epoch_and_batch():
    x = np.arange(8, dtype=np.float32).reshape(8, 1)
    draws = []

    def record(xb, rng):
        draws.append(rng.integers(1 << 30))
        return xb * 2

    loader = data.DataLoader(x, None, batch_size=4, seed=3, transform=record)
    first = [b.copy() for b in loader]
    np.testing.assert_array_equal(np.concatenate(first), x * 2)
    list(loader)  # epoch 1
    loader.set_epoch(0)
    list(loader)
    assert draws[0] != draws[1] and draws[:2] == draws[4:6] and draws[2:4] != draws[:2]
