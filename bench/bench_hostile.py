"""Benchmark: how fast, and in how little memory, hostile checkpoint files are refused.

Saves a model of about ``--mb`` MB (the ``Net`` of the checkpoint tests plus one big
matrix) with an optimizer, builds the hostile corpus of
``tests/checkpoint/hostile_checkpoints.py`` from it (nested and flat zip bombs inflating to
``--inflate-mb``, ``/dev/zero``, a FIFO, 100,000 members, 100,000 arrays, lying
central directories, a huge shape, a truncated file), then loads each one into a
fresh copy of the model in a forked child and reports, per file: whether it was
refused with a ``CheckpointError``, the time to refuse (median of ``--reps``) and
the growth of the child's peak resident memory (``ru_maxrss``) and of traced Python
and numpy allocations (``tracemalloc``, a separate run) while refusing.

Goal (issue 15): every file refused in under 1 s using under 100 MB beyond the model.

Usage: ``python bench/bench_hostile.py [--mb 100] [--inflate-mb 1024] [--reps 3] [--dir /tmp]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc

_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "model")
sys.path.insert(0, _TESTS)

import hostile_checkpoints as hostile  # noqa: E402
from test_checkpoint_helpers import Leaf, Net, fake_grads  # noqa: E402

from singa import checkpoint as ck  # noqa: E402
from singa import opt  # noqa: E402


class BenchNet(Net):
    """The tests' Net plus one matrix of about ``mb`` MB of float32."""

    def __init__(self, mb: float):
        super().__init__()
        self.big = Leaf(max(1, int(mb * 1e6 / 4 / 256)), 256)


def _model(mb: float) -> BenchNet:
    m = BenchNet(mb)
    m.optimizer = opt.SGD(0.1, momentum=0.9)
    fake_grads(m, m.optimizer, steps=1)
    return m


def _refuse_once(path: str, mb: float, traced: bool) -> dict:
    """Load ``path`` into a fresh model (this process); what happened."""
    model = _model(mb)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if traced:
        tracemalloc.start()
    t0 = time.perf_counter()
    try:
        ck.load_model(model, path)
        outcome = "LOADED"
    except ck.CheckpointError as e:
        outcome = str(e).splitlines()[0][:110]
    except Exception as e:  # anything but a CheckpointError is a finding
        outcome = f"{type(e).__name__}: {e}"[:110]
    elapsed = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] if traced else 0
    if traced:
        tracemalloc.stop()
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"outcome": outcome, "s": elapsed, "rss_mb": (rss1 - rss0) / 1024, "traced_mb": peak / 2**20}


def _in_child(path: str, mb: float, traced: bool, limit_s: int) -> dict:
    """:func:`_refuse_once` in a forked child (its own peak memory), killed after ``limit_s``."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            import signal

            signal.alarm(limit_s)
            res = _refuse_once(path, mb, traced)
        except BaseException as e:  # report, never return into the parent's code
            res = {
                "outcome": f"{type(e).__name__}: {e}"[:110],
                "s": float("nan"),
                "rss_mb": 0,
                "traced_mb": 0,
            }
        os.write(w, json.dumps(res).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        return {"outcome": f"child died (status {status})", "s": float("nan"), "rss_mb": 0, "traced_mb": 0}
    return json.loads(data)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=100, help="model size in MB")
    ap.add_argument("--inflate-mb", type=int, default=1024, help="what the zip bombs inflate to")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default=None, help="folder for the corpus (default: a temporary one)")
    ap.add_argument("--limit-s", type=int, default=60, help="kill a load that takes longer")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        good_path = os.path.join(folder, "good.zip")
        ck.save_model(_model(args.mb), good_path, {"epoch": 1})
        with open(good_path, "rb") as f:
            good = f.read()
        sizes = {"nested_zip_bomb": args.inflate_mb << 20, "flat_zip_bomb": args.inflate_mb << 20}
        print(f"model {len(good) / 1e6:.0f} MB checkpoint; zip bombs inflate to {args.inflate_mb} MiB")
        print(
            f"{'file':<22} {'size':>9} {'median s':>9} {'max s':>7} {'RSS MB':>7} {'traced MB':>9}  outcome"
        )
        for name, build in hostile.CORPUS.items():
            kw = {"inflated": sizes[name]} if name in sizes else {}
            path = build(folder, good, **kw)
            runs = [_in_child(path, args.mb, False, args.limit_s) for _ in range(args.reps)]
            traced = _in_child(path, args.mb, True, args.limit_s)
            size = os.stat(path).st_size if os.path.isfile(path) else 0
            times = [r["s"] for r in runs]
            print(
                f"{name:<22} {size:>9} {statistics.median(times):>9.4f} {max(times):>7.4f} "
                f"{max(r['rss_mb'] for r in runs):>7.1f} {traced['traced_mb']:>9.1f}  {runs[0]['outcome']}"
            )


if __name__ == "__main__":
    main()
