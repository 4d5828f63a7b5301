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
    t0 = time.perf_counter()
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
    return {"wall": time.perf_counter() - t0, "blocked": blocked}


def main(argv: list[str] | None = None) -> dict:
    """Run the modes alternately and print the table; returns the raw results."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--every", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    a = ap.parse_args(argv)
    res: dict = {mode: {"wall": [], "blocked": []} for mode in MODES}
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="singa-bench-ckpt-", dir=a.dir) as tmp:
        for rep in range(a.reps):
            for mode in MODES if rep % 2 == 0 else MODES[::-1]:
                r = run(mode, a.steps, a.every, a.batch, os.path.join(tmp, f"{mode}-{rep}"))
                res[mode]["wall"].append(r["wall"])
                res[mode]["blocked"] += r["blocked"]
    base = statistics.median(res["none"]["wall"])
    sync_block = statistics.median(res["sync"]["blocked"]) if res["sync"]["blocked"] else float("nan")
    print(
        f"ResNet-20, batch {a.batch}, {a.steps} steps, a save every {a.every} steps, {a.reps} reps "
        f"(load average {load0:.1f} -> {os.getloadavg()[0]:.1f}: figures under load)"
    )
    print(f"{'mode':6} {'run s (median)':>15} {'overhead':>9} {'save blocks ms (median)':>24} {'of sync':>8}")
    for mode in MODES:
        wall = statistics.median(res[mode]["wall"])
        blocks = res[mode]["blocked"]
        blk = statistics.median(blocks) if blocks else float("nan")
        over = f"{100 * (wall / base - 1):+.1f}%" if mode != "none" else ""
        share = f"{100 * blk / sync_block:.0f}%" if blocks else ""
        print(f"{mode:6} {wall:15.2f} {over:>9} {1000 * blk:24.1f} {share:>8}")
    return res


if __name__ == "__main__":
    main()
