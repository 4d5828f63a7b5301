"""bench/bench_fit.py runs its smallest configuration and prints a row per model
(structure only: no clock value is checked)."""

import os
import sys

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
sys.path.insert(0, BENCH)

import bench_fit  # noqa: E402


def test_bench_fit_rows(capsys):
    assert (
        bench_fit.main(["--steps", "2", "--reps", "1", "--warmup", "0", "--pause", "0", "--batch", "4"]) == 0
    )
    rows = [
        ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| mlp") or ln.startswith("| cnn")
    ]
    assert [r.split("|")[1].strip() for r in rows] == ["mlp", "cnn"]
    assert all(r.rstrip().endswith("% |") for r in rows)


def test_both_sides_train_the_same_steps():
    import numpy as np

    sides, models = bench_fit.epochs("cnn", 4, 3)
    for _ in range(2):
        sides["hand loop"]()
        sides["fit"]()
    a, b = (m.get_states() for m in models.values())
    assert models["fit"].optimizer.steps == models["hand loop"].optimizer.steps == 6
    for k in a:
        np.testing.assert_array_equal(a[k].to_numpy(), b[k].to_numpy(), err_msg=k)
