"""bench/bench_gpt.py, bench/bench_vit.py and bench/gpt_e2e.py run their smallest configurations and give
the rows they promise; the PyTorch twin (where PyTorch imports) computes our logits and
trains to our losses. Nothing here reads a clock's value."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench")
sys.path.insert(0, BENCH)

import bench_gpt  # noqa: E402
import bench_vit  # noqa: E402
import gpt_e2e  # noqa: E402

TINY = ["--batch", "2", "--context", "8", "--steps", "1", "--reps", "1", "--pause", "0"]


def test_bench_gpt_rows_without_torch():
    out = bench_gpt.main(TINY + ["--gen-tokens", "3", "--no-torch", "--no-memory"])
    assert set(out["step_ms"]) == {"singa_eager", "singa_graph"}
    assert set(out["tokens_per_s"]) == {"singa_cached", "singa_no_cache"}
    assert "load average" in out["load_before"]
    quiet = bench_gpt.main(TINY + ["--gen-tokens", "0", "--no-torch", "--no-memory"])
    assert "tokens_per_s" not in quiet


def test_gpt_e2e_without_torch(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("to be or not to be, that is the question. " * 20, encoding="utf-8")
    row = gpt_e2e.main(
        [
            "--text",
            str(f),
            "--steps",
            "3",
            "--batch",
            "2",
            "--context",
            "8",
            "--eval-batches",
            "1",
            "--no-torch",
        ]
    )
    assert np.isfinite(row["singa_val_loss"]) and "torch_val_loss" not in row


def test_torch_twin_equals_ours_and_trains_alike(tmp_path):
    try:
        import torch  # noqa: F401
        import torch_gpt
    except Exception:
        pytest.skip("torch is not importable")
    from singa import device, tensor, zoo

    device.get_default_device().set_rand_seed(0)
    m = zoo.create("gpt", num_classes=13, num_layers=2, width=16, num_heads=2, context=8)
    m.eval()
    ids = np.random.default_rng(0).integers(0, 13, (2, 8))
    tw = torch_gpt.twin_of(m)
    want = tw(torch.from_numpy(ids)).detach().numpy()
    np.testing.assert_allclose(m(tensor.from_numpy(ids)).to_numpy(), want, rtol=1e-5, atol=1e-5)
    f = tmp_path / "t.txt"
    f.write_text("abcdefghijklm" * 30, encoding="utf-8")
    row = gpt_e2e.main(
        ["--text", str(f), "--steps", "4", "--batch", "2", "--context", "8", "--eval-batches", "1"]
    )
    assert row["relative_difference"] < 1e-3


def test_bench_vit_rows_without_torch():
    out = bench_vit.main(
        [
            "--batch",
            "2",
            "--layers",
            "1",
            "--width",
            "8",
            "--steps",
            "1",
            "--reps",
            "1",
            "--pause",
            "0",
            "--no-torch",
        ]
    )
    assert set(out["step_ms"]) == {"singa_vit", "singa_cnn"} and "ratio_singa_over_torch" not in out


@pytest.mark.parametrize("mode", ["graph", "eager"])
def test_profile_gpt_prints_the_timing_and_the_singa_profile(capsys, mode):
    import profile_gpt

    profile_gpt.main(["--mode", mode, "--batch", "2", "--context", "8", "--steps", "1", "--rows", "3"])
    out = capsys.readouterr().out
    assert out.startswith(f"{mode}: median ") and "load" in out
    assert "function calls" in out and "Ordered by: internal time" in out
