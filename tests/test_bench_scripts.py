"""The benchmark scripts of bench/ run their smallest configurations (without PyTorch)
and produce the rows they promise; their helpers do what they say. Nothing here reads
a clock's value: the checks are on structure and counts."""

from __future__ import annotations

import json
import math
import os
import sys

import numpy as np
import pytest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench")
sys.path.insert(0, BENCH)

import _harness  # noqa: E402
import _rss_child  # noqa: E402
import bench_depthwise  # noqa: E402
import bench_graph  # noqa: E402
import bench_scaling  # noqa: E402
import bench_train  # noqa: E402
import torch_train_cnn  # noqa: E402

TINY = ["--steps", "1", "--reps", "1", "--warmup", "0", "--pause", "0"]


def test_run_blocks_counts_steps_and_alternates():
    calls = []
    steps = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    timings = _harness.run_blocks(steps, reps=2, block=lambda key: 3 if key == "a" else 2, warmup=1, pause=0)
    assert len(timings["a"].wall) == 6 and len(timings["a"].cpu) == 6
    assert len(timings["b"].wall) == 4
    # blocks alternate, warm-up step first; every other round runs the sides in reverse
    assert calls == ["a"] * 4 + ["b"] * 3 + ["b"] * 3 + ["a"] * 4


def test_child_reports_its_own_peak_rss():
    big = np.ones(200_000_000 // 8)  # 200 MB touched in this process
    code = (
        "import json, resource; print(json.dumps({'kb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))"
    )
    out = _harness.run_child(["-c", code])
    assert out["kb"] * 1024 < 100e6, "the child's ru_maxrss carried this process's peak"
    assert big.sum() == big.size


def test_run_child_failure_names_the_command():
    with pytest.raises(RuntimeError, match="exit 3"):
        _harness.run_child(["-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"])


def test_thread_env_sets_every_thread_variable():
    env = _harness.thread_env(1)
    assert all(env[v] == "1" for v in _harness.THREAD_VARS)


def test_bench_graph_rows(capsys):
    assert bench_graph.main(["--models", "mlp,cnn", "--batch", "4", "--no-torch", "--no-memory", *TINY]) == 0
    out = capsys.readouterr().out
    assert "start:" in out and "end:" in out
    for desc in ("MLP 784-100-10", "MNIST CNN"):
        for mode in ("eager", "graph"):
            assert f"| {desc} | 4 | {mode} |" in out
    assert "| MLP 784-100-10 | 79,510 | - | - |" in out  # parameter counts, no torch twin


def test_bench_train_rows(capsys):
    assert bench_train.main(["--models", "mlp", "--batch", "4", "--no-torch", *TINY]) == 0
    out = capsys.readouterr().out
    assert "start:" in out and "end:" in out
    assert any(line.startswith("MLP 784-100-10") and "singa" in line for line in out.splitlines())


def test_bench_graph_tracemalloc_peak_positive():
    step_peak, total_peak = bench_graph.peak_memory("mlp", "graph", 4, warmup=1, steps=1)
    assert 0 < step_peak <= total_peak


def test_bench_graph_batches_and_aliases():
    args = bench_graph.parser().parse_args(["--batch-for", "resnet18=16,resnet=8"])
    batches = bench_graph.parse_batches(args, ["cnn", "resnet8", "resnet18"])
    assert batches == {"cnn": 64, "resnet8": 8, "resnet18": 16}
    assert bench_graph.parse_batches(bench_graph.parser().parse_args([]), ["resnet18"]) == {"resnet18": 32}
    with pytest.raises(SystemExit):
        bench_graph.resolve("vgg")


def test_rss_child_reports_marks(capsys):
    assert _rss_child.main(["singa-graph", "mlp", "4", "2", "1"]) == 0
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rec["lib"] == "singa-graph" and rec["steps"] == 2
    assert 0 < rec["imports_mb"] <= rec["built_mb"] <= rec["step1_mb"] <= rec["peak_mb"]


def test_bench_scaling_child_cells(capsys):
    argv = ["--child", "--threads", "1", "--models", "mlp", "--batches", "4,8", "--libs", "graph", *TINY]
    assert bench_scaling.main(argv) == 0
    cells = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["cells"]
    assert [(c["model"], c["batch"], c["lib"]) for c in cells] == [("mlp", 4, "graph"), ("mlp", 8, "graph")]
    assert all(c["steps"] == bench_scaling.STEPS_FOR["mlp"] and c["median_s"] > 0 for c in cells)


def test_bench_scaling_table_rows_and_speedups():
    def cell(model, batch, threads, lib, median):
        return {
            "model": model,
            "batch": batch,
            "threads": threads,
            "lib": lib,
            "median_s": median,
            "min_s": median,
        }

    cells = [
        cell("cnn", 64, 1, "graph", 0.04),
        cell("cnn", 64, 2, "graph", 0.02),
        cell("cnn", 64, 1, "torch", 0.03),
    ]
    cells.append(cell("cnn", 64, 2, "torch", 0.01))
    cells.append({"model": "cnn", "batch": 64, "threads": 2, "lib": "torch-compile", "error": "x"})
    lines = bench_scaling.table(
        cells, ["cnn"], [64], [1, 2], ["graph", "torch", "torch-compile"]
    ).splitlines()
    assert len(lines) == 4
    assert lines[2].split(" | ")[:3] == ["| cnn", "64", "1"]
    two = lines[3].split(" | ")
    assert two[5] == "failed" and two[6] == "2.00x"  # graph / best torch
    assert two[8:] == ["2.00x", "3.00x |"]  # speed-ups from one thread: graph, torch


def test_torch_script_batches_match_singa_dataloader():
    from singa import data

    rng = np.random.default_rng(1)
    x = rng.random((50, 1, 6, 6), dtype=np.float32)
    y = rng.integers(0, 10, 50)
    mean, std = data.channel_mean_std(x)
    m4, s4 = mean.reshape(1, 1, 1, 1), std.reshape(1, 1, 1, 1)
    loader = data.DataLoader(x, y, 16, shuffle=True, seed=3, drop_last=True, mean=mean, std=std)
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        ours = list(loader)
        theirs = list(torch_train_cnn.train_batches(x, y, 16, 3, epoch, m4, s4))
        assert len(ours) == len(theirs) == 3
        for (xa, ya), (xb, yb) in zip(ours, theirs, strict=True):
            np.testing.assert_array_equal(xa, xb)
            np.testing.assert_array_equal(ya, yb)
    val = data.DataLoader(x, y, 16, mean=mean, std=std)
    pairs = zip(val, torch_train_cnn.eval_batches(x, y, 16, m4, s4), strict=True)
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in pairs)


def test_torch_script_schedule_is_singa_cosine():
    from singa import opt

    sched = opt.CosineDecay(0.05, decay_steps=10)
    for step in (0, 3, 10, 12):
        assert math.isclose(0.05 * torch_train_cnn.cosine(step, 10), sched(step), rel_tol=1e-12)


def test_bench_e2e_recipe_is_singa_train_default():
    import bench_e2e

    from singa import data

    assert bench_e2e.recipe(64, data.dataset_info("fashion-mnist-mini")) == {
        "lr": 0.05,
        "momentum": 0.9,
        "weight_decay": 0.0,
        "eval_batch_size": 256,
    }


def test_bench_depthwise_rows(capsys):
    assert (
        bench_depthwise.main(["--shapes", "1x3x6", "2x4x5", "--reps", "1", "--block", "1", "--no-torch"]) == 0
    )
    rows = [ln.split() for ln in capsys.readouterr().out.splitlines() if not ln.startswith("#")][1:]
    assert [(r[0], r[1]) for r in rows] == [
        (s, v) for s in ("1x3x6", "2x4x5") for v in ("depthwise", "passes", "grouped")
    ]


def test_gemm_floor_records_each_convolutions_product():
    import bench_gemm_floor

    # MNIST CNN, batch 2: conv 5x5 1->32 on 28x28 (24x24 out), pool, conv 5x5 32->64 on 12x12 (8x8 out)
    assert bench_gemm_floor.product_shapes("cnn", 2) == [(2 * 24 * 24, 25, 32), (2 * 8 * 8, 800, 64)]
    shapes = bench_gemm_floor.product_shapes("resnet20", 1)
    assert len(shapes) == 21 and shapes[0] == (32 * 32, 27, 16) and shapes[-1][2] == 64


def test_gemm_floor_step_runs_every_product():
    import bench_gemm_floor

    calls = []
    real = np.matmul

    step = bench_gemm_floor.products_step([(4, 3, 2), (5, 6, 7)], 1)
    try:
        np.matmul = lambda a, b, out=None: calls.append((a.shape, b.shape)) or real(a, b, out=out)
        step()
    finally:
        np.matmul = real
    assert calls == [((4, 3), (3, 2)), ((5, 6), (6, 7))]
