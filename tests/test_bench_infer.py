"""bench/bench_infer.py runs its smallest configuration and prints the rows it promises
(structure and counts only; no clock value is checked)."""

from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("onnxruntime")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))

import bench_infer  # noqa: E402


def test_bench_infer_prints_a_row_per_mode_and_the_output_differences(capsys):
    argv = [
        "--models",
        "cnn",
        "--batches",
        "1",
        "--reps",
        "1",
        "--calls",
        "1",
        "--warmup",
        "0",
        "--pause",
        "0",
    ]
    assert bench_infer.main(argv) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.startswith("| MNIST CNN")]
    assert [r.split("|")[3].strip() for r in rows] == list(bench_infer.MODES)
    assert all(r.rstrip().endswith("x |") for r in rows)
    diffs = out.split("largest |output - onnxruntime output|:")[1].splitlines()[0]
    assert diffs.count("cnn batch 1") == len(bench_infer.MODES) - 1
    assert all(float(d.rsplit(":", 1)[1]) < 1e-5 for d in diffs.strip().split(";"))
    assert "start:" in out and "end:" in out


def test_bench_infer_rejects_unknown_names():
    with pytest.raises(SystemExit):
        bench_infer.main(["--models", "nope"])
