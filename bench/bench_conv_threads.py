"""The convolution's batch slices on the workers, against an earlier convolution, in one process.

``singa/autograd/conv.py`` runs the batch slices of its kernels (columns, products,
col2im, weight-gradient partials) on :mod:`singa.kernels.workers`, BLAS on one thread
each. This script times it against the convolution of an earlier commit (``--base``,
loaded from git into this process and swapped in as the methods of ``Conv2d``), in
interleaved blocks with a pause between them (``_harness.run_blocks``):

- ``base``: the earlier convolution (BLAS on its own thread count);
- ``new``: the current one on ``workers.worker_count()`` workers;
- ``new-1w`` (``--one-worker``): the current one on one worker (every product on one
  BLAS thread: what a single core gives);
- ``--variant NAME:CONST=VALUE[;CONST=VALUE]``: the current one with constants of
  ``singa/kernels/conv_slices.py`` changed (e.g. ``--variant pp2:_SLICES_PER_PIECE=2``), to try a setting.

Two levels: single convolutions (``--layers``: forward, forward + backward, and the
eval forward, of the zoo networks' layer shapes) and training steps of the
``bench_graph.py`` models (``--models``, eager or graph mode). Each line: median and
minimum wall time, median CPU time (``time.process_time``, all threads), and the ratio
of medians and of minima to ``base``. ``uptime`` is printed at the start and the end.

    python bench/bench_conv_threads.py                              # layers + cnn,resnet8,resnet20 graph
    python bench/bench_conv_threads.py --models resnet20 --no-layers --reps 6
    python bench/bench_conv_threads.py --base 7c6bead --one-worker
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import types

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import bench_graph as bg  # noqa: E402
from _harness import ms, run_blocks, uptime  # noqa: E402

from singa.autograd import conv  # noqa: E402
from singa.kernels import conv_slices, workers  # noqa: E402

#: the convolution before its slices ran on the workers (main at the start of this work)
DEFAULT_BASE = "7c6bead"

# (name, x shape without the batch, W shape, stride, padding, NHWC input)
LAYERS = [
    ("cnn.conv1 1->32 5x5 28", (1, 28, 28), (32, 1, 5, 5), 1, 0, False),
    ("cnn.conv2 32->64 5x5 12", (32, 12, 12), (64, 32, 5, 5), 1, 0, True),
    ("resnet.conv1 3->16 3x3 32", (3, 32, 32), (16, 3, 3, 3), 1, 1, False),
    ("resnet 16->16 3x3 32", (16, 32, 32), (16, 16, 3, 3), 1, 1, True),
    ("resnet 16->32 3x3 /2", (16, 32, 32), (32, 16, 3, 3), 2, 1, True),
    ("resnet 32->32 3x3 16", (32, 16, 16), (32, 32, 3, 3), 1, 1, True),
    ("resnet 64->64 3x3 8", (64, 8, 8), (64, 64, 3, 3), 1, 1, True),
    ("resnet 32->64 1x1 /2", (32, 16, 16), (64, 32, 1, 1), 2, 0, True),
]


def load_base(rev: str) -> types.ModuleType:
    """``singa/autograd/conv.py`` as of git revision ``rev``, as a module of its own."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    src = subprocess.run(
        ["git", "-C", root, "show", f"{rev}:singa/autograd/conv.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    mod = types.ModuleType("singa.autograd._conv_base")
    mod.__file__ = f"<conv.py at {rev}>"
    exec(compile(src, mod.__file__, "exec"), mod.__dict__)
    return mod


def _methods(cls: type) -> dict:
    """The plain methods a class defines (not ``__init__``: its ``super()`` is bound to
    the class it was written in)."""
    return {k: v for k, v in vars(cls).items() if callable(v) and not k.startswith("__")}


class Switch:
    """Installs one setting's convolution methods and worker count."""

    def __init__(self, base: types.ModuleType, variants: dict):
        self.new = _methods(conv.Conv2d)
        self.base = _methods(base.Conv2d)
        self.workers = workers.worker_count()
        self.variants = variants
        self.defaults = {k: getattr(conv_slices, k) for v in variants.values() for k in v}

    def __call__(self, setting: str) -> None:
        for k, v in (self.base if setting == "base" else self.new).items():
            setattr(conv.Conv2d, k, v)
        for k, v in {**self.defaults, **self.variants.get(setting, {})}.items():
            setattr(conv_slices, k, v)
        workers._count[:] = [1 if setting == "new-1w" else self.workers]


def parse_variant(text: str) -> tuple[str, dict]:
    """``NAME:CONST=VALUE;CONST=VALUE`` -> (NAME, {CONST: int VALUE})."""
    name, _, body = text.partition(":")
    consts = {}
    for item in filter(None, body.split(";")):
        key, _, value = item.partition("=")
        if not hasattr(conv_slices, key):
            raise SystemExit(f"--variant: conv_slices.py has no constant {key!r}")
        consts[key] = int(value)
    return name, consts


def layer_steps(batch: int, switch: Switch, settings: list[str]) -> dict:
    """(layer, kind, setting) -> a zero-argument call of one convolution."""
    rng = np.random.default_rng(0)
    steps = {}
    for name, xs, ws, stride, pad, nhwc in LAYERS:
        x = rng.standard_normal((batch, *xs)).astype(np.float32)
        if nhwc:
            x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
        w = rng.standard_normal(ws).astype(np.float32)
        kh, kw = ws[2:]
        for kind in ("eval", "train"):
            for s in settings:

                def call(x=x, w=w, kind=kind, s=s, stride=stride, pad=pad, kh=kh, kw=kw, first=xs[0] == 1):
                    switch(s)
                    op = conv.Conv2d((kh, kw), (stride, stride), (pad,) * 4)
                    op.requires_grad = kind == "train"
                    op.needs_grad = (not first, True)
                    y = op.forward(x, w)
                    if kind == "train":
                        op.backward(np.ones_like(y))

                steps[(name, kind, s)] = call
    return steps


def model_steps(names: list[str], mode: str, batch: int | None, switch: Switch, settings: list[str]) -> dict:
    """(model, mode, setting) -> a training step (each setting its own model, traced under it)."""
    steps = {}
    for name in names:
        for s in settings:
            switch(s)
            step, _ = bg.singa_step(name, mode, batch or bg.MODELS[name].batch)
            step()  # the first step (graph tracing) under this setting

            def call(step=step, s=s):
                switch(s)
                step()

            steps[(name, mode, s)] = call
    return steps


_ROW = "{:<44} {:<7} {:>10} {:>9} {:>8} {:>8} {:>8}"


def report(timings: dict, settings: list[str]) -> None:
    """One line per key: median, minimum, CPU median, ratios to ``base`` (to ``new``
    without a base)."""
    head = ("what", "setting", "median ms", "min ms", "cpu ms", "med/base", "min/base")
    print(_ROW.format(*head))
    for key, t in timings.items():
        base = timings.get((*key[:-1], "base")) or timings.get((*key[:-1], "new"))
        r_med = "-" if base is None else f"{t.median / base.median:.2f}"
        r_min = "-" if base is None else f"{t.minimum / base.minimum:.2f}"
        what = " ".join(str(k) for k in key[:-1])
        print(_ROW.format(what, key[-1], ms(t.median), ms(t.minimum), ms(t.cpu_median), r_med, r_min))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default=DEFAULT_BASE, help="git revision of the convolution to compare with")
    ap.add_argument("--models", default="cnn,resnet8,resnet20", help="bench_graph models ('' for none)")
    ap.add_argument("--mode", default="graph", choices=["eager", "graph"])
    ap.add_argument("--batch", type=int, default=None, help="batch size (default: each model's)")
    ap.add_argument("--no-layers", action="store_true", help="skip the single convolutions")
    ap.add_argument("--layer-batch", type=int, default=64)
    ap.add_argument("--one-worker", action="store_true", help="add the new convolution on one worker")
    ap.add_argument("--variant", action="append", default=[], help="NAME:CONST=VALUE;... (repeatable)")
    ap.add_argument("--only-new", action="store_true", help="leave out the base convolution")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3, help="timed steps per block")
    ap.add_argument("--layer-steps", type=int, default=10, help="timed calls per block of a layer")
    ap.add_argument("--pause", type=float, default=0.2)
    args = ap.parse_args(argv)
    variants = dict(parse_variant(v) for v in args.variant)
    switch = Switch(load_base(args.base), variants)
    settings = ["base"] * (not args.only_new) + ["new"] + ["new-1w"] * args.one_worker + list(variants)
    print(f"start: {uptime()}")
    print(f"base: conv.py at {args.base}; workers: {switch.workers}; numpy {np.__version__}")
    if not args.no_layers:
        steps = layer_steps(args.layer_batch, switch, settings)
        report(run_blocks(steps, args.reps, args.layer_steps, 1, args.pause), settings)
    names = [bg.resolve(n) for n in args.models.split(",") if n]
    if names:
        steps = model_steps(names, args.mode, args.batch, switch, settings)
        report(run_blocks(steps, args.reps, args.steps, 1, args.pause), settings)
    switch("new")
    print(f"end: {uptime()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
