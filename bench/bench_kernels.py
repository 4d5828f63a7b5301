"""The non-convolution kernels of a training step, one and two worker threads, and
against a baseline tree.

Each case is one operator's forward and backward on a shape from the zoo's ResNet-20
and MNIST CNN at batch 64 (float32, NHWC memory as the convolutions return it):
BatchNorm (training), ReLU and 2x2 max-pooling. Variants: this tree with one worker
(``w1``) and with two (``w2``, :mod:`singa.kernels.workers`), and with ``--baseline
DIR`` the operators of another checkout (``git worktree add DIR <commit>``) loaded from
DIR's files on top of this tree's support modules, so that old and new kernels run in
one process. Blocks of calls alternate over ``--reps`` rounds with a pause between
blocks (``_harness.run_blocks``); medians and minima of wall time per call, median CPU
time (``process_time``, all threads), and the bits of the two worker counts compared.

    python bench/bench_kernels.py                          # w1 against w2
    git archive <commit> singa | tar -x -C /tmp/base       # a baseline tree
    python bench/bench_kernels.py --baseline /tmp/base --reps 8
    OMP_NUM_THREADS=1 python bench/bench_kernels.py        # BLAS on one thread
    python bench/bench_kernels.py --baseline /tmp/base --steps cnn,resnet20 --reps 5 --calls 4

``--steps``: whole graph training steps (``bench_graph.singa_step``, batch 64) instead,
one model traced with the baseline's BatchNorm, ReLU and MaxPool operators (``base``,
the rest of the step as in this tree, 2 workers) and one with this tree's, run with one
and two workers; ``--calls`` steps per block.
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import os
import shutil
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from _harness import run_blocks, uptime  # noqa: E402

from singa.autograd import activation, normalization, pooling  # noqa: E402
from singa.kernels import workers  # noqa: E402

#: (label, operator family, NCHW shape)
CASES = [
    ("BatchNorm (64,16,32,32)", "bn", (64, 16, 32, 32)),
    ("BatchNorm (64,32,16,16)", "bn", (64, 32, 16, 16)),
    ("BatchNorm (64,64,8,8)", "bn", (64, 64, 8, 8)),
    ("ReLU (64,16,32,32)", "relu", (64, 16, 32, 32)),
    ("ReLU (64,32,24,24)", "relu", (64, 32, 24, 24)),
    ("ReLU (64,64,8,8)", "relu", (64, 64, 8, 8)),
    ("MaxPool 2x2 (64,32,24,24)", "pool", (64, 32, 24, 24)),
    ("MaxPool 2x2 (64,64,8,8)", "pool", (64, 64, 8, 8)),
]
FILES = {"bn": "normalization.py", "relu": "activation.py", "pool": "pooling.py"}


def nhwc(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """A random float32 (N, C, H, W) array with NHWC memory."""
    n, c, h, w = shape
    return rng.standard_normal((n, h, w, c)).astype(np.float32).transpose(0, 3, 1, 2)


def operators(tree: str | None) -> dict:
    """family -> a maker of a fresh operator, from this tree or ``tree``'s files."""
    mods = {"bn": normalization, "relu": activation, "pool": pooling}
    if tree:
        # loaded from copies in a scratch folder: numba's cache is keyed by the source's
        # folder and the module's name, so the baseline's kernels never mix with this tree's
        scratch = tempfile.mkdtemp(prefix="bench_kernels_")
        atexit.register(shutil.rmtree, scratch, True)
        for fam, name in FILES.items():
            path = shutil.copy(os.path.join(tree, "singa/autograd", name), os.path.join(scratch, name))
            spec = importlib.util.spec_from_file_location(f"baseline_{fam}", path)
            mods[fam] = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # numba's cache
            spec.loader.exec_module(mods[fam])
    return {
        "bn": lambda: mods["bn"].BatchNorm2d(0.9, 1e-5, True),
        "relu": lambda: mods["relu"].ReLU(),
        "pool": lambda: mods["pool"].MaxPool2d((2, 2), (2, 2), (0, 0, 0, 0)),
    }


def case_call(fam: str, shape: tuple, make, rng: np.random.Generator):
    """A zero-argument call: one operator's forward and backward on fixed arrays;
    returns its outputs (which the next call may overwrite)."""
    x = nhwc(rng, shape)
    out_shape = (shape[0], shape[1], shape[2] // 2, shape[3] // 2) if fam == "pool" else shape
    dy = nhwc(rng, out_shape)
    c = shape[1]
    params = [rng.standard_normal(c).astype(np.float32) for _ in range(2)]
    running = [np.zeros(c, np.float32), np.ones(c, np.float32)]

    def call():
        op = make()
        op.requires_grad = True
        op.needs_grad = (True, True, True, False, False) if fam == "bn" else (True,)
        y = op.forward(x, *params, *running) if fam == "bn" else op.forward(x)
        g = op.backward(dy)
        return [y] + [a for a in (g if isinstance(g, tuple) else (g,)) if a is not None]

    return call


def with_workers(call, count: int):
    def run():
        workers._count[:] = [count]
        return call()

    return run


def graph_step(name: str, classes: dict | None):
    """A traced graph training step of zoo model ``name`` (``bench_graph.singa_step``),
    with ``classes`` (family -> operator class) standing in for this tree's while it
    is traced; the replay keeps the operators it traced."""
    from bench_graph import singa_step

    mods = {
        "bn": (normalization, "BatchNorm2d"),
        "relu": (activation, "ReLU"),
        "pool": (pooling, "MaxPool2d"),
    }
    saved = {fam: getattr(mod, attr) for fam, (mod, attr) in mods.items()}
    try:
        for fam, cls in (classes or {}).items():
            setattr(mods[fam][0], mods[fam][1], cls)
        step, _ = singa_step(name, "graph", 64)
        step()
    finally:
        for fam, (mod, attr) in mods.items():
            setattr(mod, attr, saved[fam])
    return step


def step_blocks(names: list[str], tree: str | None) -> dict:
    """(model, variant) -> step: this tree's operators with 1 and 2 workers, and the
    baseline's (with 2 workers for the rest of the step) when ``tree`` is given."""
    steps = {}
    base = operators(tree) if tree else None
    for name in names:
        if base:
            classes = {fam: type(make()) for fam, make in base.items()}
            steps[(name, "base")] = with_workers(graph_step(name, classes), 2)
        new = graph_step(name, None)
        steps[(name, "w1")] = with_workers(new, 1)
        steps[(name, "w2")] = with_workers(new, 2)
    return steps


def step_main(args: argparse.Namespace) -> int:
    """``--steps``: graph training steps, alternating blocks."""
    steps = step_blocks(args.steps.split(","), args.baseline)
    timings = run_blocks(steps, args.reps, args.calls, warmup=1, pause=0.3)
    print(f"{'graph step':12s} {'variant':8s} {'median':>9s} {'min':>9s} {'CPU':>9s}  (ms)")
    for (name, variant), t in timings.items():
        print(
            f"{name:12s} {variant:8s} {t.median * 1e3:9.1f} {t.minimum * 1e3:9.1f} {t.cpu_median * 1e3:9.1f}"
        )
    print(f"end: {uptime()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", help="a checkout whose operators run as 'base' (w1 and w2 as set)")
    ap.add_argument("--reps", type=int, default=6, help="rounds of blocks")
    ap.add_argument("--calls", type=int, default=10, help="timed calls per block")
    ap.add_argument("--pause", type=float, default=0.05, help="seconds between blocks")
    ap.add_argument("--steps", help="instead: graph training steps of these zoo models, e.g. cnn,resnet20")
    args = ap.parse_args(argv)
    print(f"start: {uptime()}")
    print(
        f"numpy {np.__version__}, workers {workers.worker_count()}, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}"
    )
    if args.steps:
        return step_main(args)
    rng = np.random.default_rng(0)
    new = operators(None)
    base = operators(args.baseline) if args.baseline else None
    steps, same = {}, {}
    for label, fam, shape in CASES:
        call = case_call(fam, shape, new[fam], rng)
        if base:
            steps[(label, "base w1")] = with_workers(case_call(fam, shape, base[fam], rng), 1)
        steps[(label, "w1")] = with_workers(call, 1)
        steps[(label, "w2")] = with_workers(call, 2)
        one = [np.array(a) for a in steps[(label, "w1")]()]  # copies: outputs may be pooled
        two = [np.array(a) for a in steps[(label, "w2")]()]
        same[label] = all(np.array_equal(a, b) for a, b in zip(one, two))
    timings = run_blocks(steps, args.reps, args.calls, warmup=1, pause=args.pause)
    print(f"{'kernel (forward + backward)':28s} {'variant':8s} {'median':>9s} {'min':>9s} {'CPU':>9s}")
    for (label, variant), t in timings.items():
        print(
            f"{label:28s} {variant:8s} {t.median * 1e3:9.3f} {t.minimum * 1e3:9.3f} {t.cpu_median * 1e3:9.3f}"
        )
    print(
        "bits equal with 1 and 2 workers: "
        + ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in same.items())
    )
    print(f"end: {uptime()}")
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
