"""Where a second core pays: singa's CPU settings side by side, in one process.

Runs training steps of the ``bench_graph.py`` models (eager and graph replay) under
several settings, interleaved in blocks with a short pause between them (so that a
burst of load falls on all of them, and one setting's spinning threads do not slow the
next), next to PyTorch CPU:

- ``split=1`` / ``split=2``: :func:`singa.kernels.workers.set_worker_count`, the threads
  that the batch-sliced convolutions and the elementwise kernels run on
  (``SINGA_NUM_THREADS``);
- ``blas-policy`` on/off: :mod:`singa.kernels.blas_threads`, which runs skinny
  matrix products on one BLAS thread (off: every product on BLAS's own thread count).

Each line gives the median and minimum wall time of a step, the median CPU time of a
step (``time.process_time``, all threads: CPU above the wall time is work on the second
core, or threads spinning), and the ratio of medians to PyTorch. With ``--first-step``
it also times the first training step of a fresh process with numba's disk cache
empty and filled (the compiled kernels of :mod:`singa.kernels.jit`).

    python bench/bench_cpu_threads.py                       # cnn and mlp, 2 threads
    python bench/bench_cpu_threads.py --models cnn --reps 8 --first-step
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import bench_graph as bg  # noqa: E402
from _harness import load_torch, mallopt  # noqa: E402

from singa.kernels import blas_threads, workers  # noqa: E402

SETTINGS = {
    "split=1 policy=on": (1, True),
    "split=2 policy=on": (2, True),
    "split=1 policy=off": (1, False),
    "split=2 policy=off": (2, False),
}
_SKINNY = blas_threads.SKINNY_SIDE


def apply(setting: str) -> None:
    """Switch singa's CPU settings to ``setting`` (a key of SETTINGS)."""
    threads, policy = SETTINGS[setting]
    workers.set_worker_count(threads)
    blas_threads.SKINNY_SIDE = _SKINNY if policy else -1


def block(step, warmup: int, steps: int) -> tuple[list[float], list[float]]:
    """(wall times, CPU times) of ``steps`` single steps after ``warmup`` untimed ones."""
    for _ in range(warmup):
        step()
    walls, cpus = [], []
    for _ in range(steps):
        c0, w0 = time.process_time(), time.perf_counter()
        step()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    return walls, cpus


FIRST_STEP = """
import sys, time
t0 = time.perf_counter()
sys.path.insert(0, {bench!r}); sys.path.insert(0, {root!r})
import bench_graph as bg
step, _ = bg.singa_step({model!r}, {mode!r}, {batch})
t = [time.perf_counter()]
for _ in range(4):
    step()
    t.append(time.perf_counter())
print(f"{{t[0] - t0:.2f}}", *(f"{{b - a:.3f}}" for a, b in zip(t, t[1:])))
"""


def first_step(model: str, mode: str, batch: int) -> None:
    """Print the first steps' times in fresh processes, numba's cache empty then filled
    (graph mode traces on step 1 and builds its replay on step 2)."""
    here = os.path.dirname(os.path.abspath(__file__))
    code = FIRST_STEP.format(bench=here, root=os.path.dirname(here), model=model, mode=mode, batch=batch)
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        for label in ("numba cache empty", "numba cache filled"):
            run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
            setup, *steps = run.stdout.split()
            print(f"{model} {mode}, {label}: import + build {setup} s, steps 1-4 {' / '.join(steps)} s")


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="cnn,mlp")
    ap.add_argument("--modes", default="eager,graph", help="from eager, graph-seq, graph")
    ap.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated keys of SETTINGS")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--pause", type=float, default=0.3, help="seconds between blocks")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--mallopt", action="store_true")
    ap.add_argument("--first-step", action="store_true", help="also time a fresh process's first step")
    return ap.parse_args(argv)


def split(text: str) -> list[str]:
    """The non-empty items of a comma-separated option."""
    return [t for t in text.split(",") if t]


def make_runs(names: list[str], modes: list[str], settings: list[str], batch: int, torch: bool) -> dict:
    """(model, mode, setting) -> step callable; PyTorch's under (model, "torch", "")."""
    runs = {}
    for name in names:
        for mode in modes:
            step = bg.singa_step(name, mode, batch)[0]
            for s in settings:
                runs[(name, mode, s)] = step
        if torch:
            runs[(name, "torch", "")] = bg.torch_step(name, batch, False)[0]
    return runs


def time_runs(runs: dict, args: argparse.Namespace) -> dict:
    """(wall times, CPU times) of every run, its blocks interleaved with the others'."""
    times = {k: ([], []) for k in runs}
    for _ in range(args.reps):
        for key, step in runs.items():
            if key[2]:
                apply(key[2])
            time.sleep(args.pause)
            w, c = block(step, args.warmup, args.steps)
            times[key][0].extend(w)
            times[key][1].extend(c)
    return times


def print_table(names: list[str], times: dict) -> None:
    """One markdown row per run: median, minimum, CPU per step and ratio to PyTorch."""
    print("| model | mode | setting | median ms | min ms | CPU ms/step | vs torch |")
    print("|---|---|---|---:|---:|---:|---:|")
    for name in names:
        tk = (name, "torch", "")
        tmed = statistics.median(times[tk][0]) if tk in times else None
        for key, (w, c) in times.items():
            if key[0] != name:
                continue
            med = statistics.median(w)
            ratio = f"{med / tmed:.2f}x" if tmed else "-"
            print(
                f"| {bg.MODELS[name].desc} | {key[1]} | {key[2] or '-'} "
                f"| {med * 1e3:.2f} | {min(w) * 1e3:.2f} "
                f"| {statistics.median(c) * 1e3:.2f} | {ratio} |"
            )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the settings line and the table."""
    args = parse(argv)
    names, settings = split(args.models), split(args.settings)
    used_mallopt = mallopt() if args.mallopt else False
    torch_version = load_torch(args.threads, args.no_torch)
    runs = make_runs(names, split(args.modes), settings, args.batch, bool(torch_version))
    try:
        times = time_runs(runs, args)
    finally:
        workers.set_worker_count(None)
        blas_threads.SKINNY_SIDE = _SKINNY
    print(
        f"batch {args.batch}; {args.reps} blocks x {args.steps} steps each; numpy BLAS and torch "
        f"{torch_version or 'n/a'} with {args.threads} threads; cpus {os.cpu_count()}; malloc tuning "
        f"{'ON' if used_mallopt else 'OFF'}; load average {os.getloadavg()[0]:.1f} at the end"
    )
    print_table(names, times)
    if args.first_step:
        for name in names:
            first_step(name, "graph", args.batch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
