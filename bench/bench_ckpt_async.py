"""Benchmark: ResNet-20 (CIFAR shapes) training that saves a checkpoint every
``--every`` steps through CheckpointManager, synchronously, asynchronously, or not at
all.

For each mode the same seeded training runs ``--steps`` steps (graph mode, SGD with
momentum, batch ``--batch`` of 3x32x32); the modes alternate over ``--reps``
repetitions so that a change of the machine's load hits them alike. Reported per
mode: the run's wall time (the final ``wait()`` included) and its overhead over
"none", and how long the calling thread was blocked by each ``save`` (for async: the
in-memory snapshot; for sync: the whole write). Targets (issue 32): async adds at
most 3 % to the run, and its save blocks for at most 15 % of a synchronous save.

Usage: ``python bench/bench_ckpt_async.py [--steps 60] [--every 20] [--reps 3]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from singa import device, opt, zoo  # noqa: E402
from singa.checkpoint import CheckpointManager  # noqa: E402
from singa.tensor import Tensor  # noqa: E402

MODES = ("none", "sync", "async")


def build(batch: int) -> tuple:
    """ResNet-20 with SGD, compiled in graph mode; its input placeholders."""
    device.get_default_device().set_rand_seed(0)
    m = zoo.resnet.resnet20(num_classes=10)
    m.set_optimizer(opt.SGD(0.05, momentum=0.9))
    tx = Tensor((batch, 3, 32, 32))
    ty = Tensor((batch,), dtype=np.int32, requires_grad=False)
    m.compile([tx], is_train=True, use_graph=True)
    return m, tx, ty


def run(mode: str, steps: int, every: int, batch: int, folder: str) -> dict:
    """One training run; returns its wall time and the blocking time of each save."""
    m, tx, ty = build(batch)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((4, batch, 3, 32, 32)).astype(np.float32)
    ys = rng.integers(0, 10, (4, batch)).astype(np.int32)
    for i in range(2):  # warm-up: the graph is traced here
        tx.copy_from_numpy(xs[i])
        ty.copy_from_numpy(ys[i])
        m(tx, ty)
    mgr = CheckpointManager(folder, keep_last=2, async_save=mode == "async") if mode != "none" else None
    blocked = []
    t0, c0 = time.perf_counter(), time.process_time()
    for step in range(1, steps + 1):
        tx.copy_from_numpy(xs[step % 4])
        ty.copy_from_numpy(ys[step % 4])
        m(tx, ty)
        if mgr is not None and step % every == 0:
            t = time.perf_counter()
            mgr.save(step, m)
            blocked.append(time.perf_counter() - t)
    if mgr is not None:
        mgr.wait()
    return {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0, "blocked": blocked}


def _table(res: dict) -> str:
    """Run time (median, min, CPU) against no saving, and the saving step's blocking time
    (median, min) against a synchronous save's."""
    med, low = statistics.median, min
    none = res["none"]
    base = {"wall": med(none["wall"]), "cpu": med(none["cpu"]), "min": low(none["wall"])}
    sync = res["sync"]["blocked"]
    head = "| mode | run s (median, min) | overhead (median, min, CPU) | save blocks ms (median, min) |"
    rows = [head + " of sync (median, min) |", "|---|---|---|---|---|"]
    for mode in MODES:
        r = res[mode]
        run_s = f"{med(r['wall']):.2f}, {low(r['wall']):.2f}"
        over = blocks = share = ""
        if mode != "none":
            pct = [med(r["wall"]) / base["wall"], low(r["wall"]) / base["min"], med(r["cpu"]) / base["cpu"]]
            over = ", ".join(f"{100 * (v - 1):+.1f}%" for v in pct)
            b = r["blocked"]
            blocks = f"{1000 * med(b):.1f}, {1000 * low(b):.1f}"
            share = f"{100 * med(b) / med(sync):.0f}%, {100 * low(b) / low(sync):.0f}%"
        rows.append(f"| {mode} | {run_s} | {over} | {blocks} | {share} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> dict:
    """Run the modes alternately and print the table; returns the raw results."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--every", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    a = ap.parse_args(argv)
    res: dict = {mode: {"wall": [], "cpu": [], "blocked": []} for mode in MODES}
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="singa-bench-ckpt-", dir=a.dir) as tmp:
        for rep in range(a.reps):
            for mode in MODES if rep % 2 == 0 else MODES[::-1]:
                r = run(mode, a.steps, a.every, a.batch, os.path.join(tmp, f"{mode}-{rep}"))
                res[mode]["wall"].append(r["wall"])
                res[mode]["cpu"].append(r["cpu"])
                res[mode]["blocked"] += r["blocked"]
    print(
        f"ResNet-20, batch {a.batch}, {a.steps} steps, a save every {a.every} steps, {a.reps} reps "
        f"(load average {load0:.1f} -> {os.getloadavg()[0]:.1f}: figures under load)"
    )
    print(_table(res))
    return res


if __name__ == "__main__":
    main()
