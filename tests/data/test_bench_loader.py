"""bench/bench_loader.py runs its smallest configuration and reports one row per loader
and worker count, plus the training step's wait share (no clock value is checked)."""

from __future__ import annotations

import json
import os
import sys

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
sys.path.insert(0, BENCH)

import bench_loader  # noqa: E402


def test_bench_loader_rows(tmp_path):
    out = tmp_path / "r.json"
    args = ["--images", "20", "--size", "20", "--image-size", "16", "--batch", "4", "--workers", "0,2"]
    assert bench_loader.main([*args, "--no-torch", "--wait-steps", "2", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert [(r["loader"], r["workers"], r["images"]) for r in res["rows"]] == [
        ("singa", 0, 20),
        ("singa", 2, 20),
    ]
    assert res["wait"]["steps"] == 2 and 0.0 <= res["wait"]["wait_share"] <= 1.0


def test_pil_twin_matches_singa_pixels(tmp_path):
    try:
        import torch  # noqa: F401
    except Exception:
        import pytest

        pytest.skip("torch does not import")
    import numpy as np

    from singa import data

    root = bench_loader.make_jpegs(str(tmp_path / "j"), 6, 12, classes=2)
    twin = bench_loader.PILTwin(root, 8)
    ours = data.ImageFolder(root, mode="RGB", image_size=8)
    for i in range(len(ours)):
        x, y = ours[i]
        tx, ty = twin[i]
        np.testing.assert_array_equal(tx.numpy(), x)
        assert ty == y
