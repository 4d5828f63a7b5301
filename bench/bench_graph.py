"""Graph-mode benchmark: Model API training steps of the zoo's networks, eager and
graph replay, side by side with the same networks in PyTorch (eager and, with
``--torch-compile``, ``torch.compile``), plus peak memory.

One step = ``model(tx, ty)`` on a ``singa.zoo`` model (forward, softmax cross-entropy,
backward, SGD momentum 0.9 update) on a fixed random batch; PyTorch runs the same
layers (parameter counts are printed and checked) with ``torch.optim.SGD``.

Method (``../shared/perf-notes.md``): after one untimed first step per (model, mode)
(its time is reported: graph tracing, torch.compile's compilation), ``--reps`` rounds;
in each, every (model, mode) in turn pauses ``--pause`` seconds, runs ``--warmup``
untimed steps and times a block of single steps. Medians and minima are over all timed
steps; "CPU" is the median process CPU time per step (both threads). Ratios divide our
median by PyTorch eager's, by torch.compile's, and by the better of the two.

Peak memory: tracemalloc's step peak and total peak of our steps (``--no-memory`` skips
it); ``--rss`` instead starts a fresh process per library that trains ResNet-20 for a
few steps and reports its peak RSS (``ru_maxrss``: the peak comes before the first
step ends, so it cannot be measured in a process that ran anything before).

Usage::

    python bench/bench_graph.py                              # all models, eager + graph + torch
    python bench/bench_graph.py --torch-compile              # add torch.compile rows
    python bench/bench_graph.py --models cnn,resnet20 --reps 5 --no-memory
    python bench/bench_graph.py --rss                        # peak RSS, ResNet-20, per library
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import sys
from dataclasses import dataclass

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from _harness import (  # noqa: E402
    Step,
    Timing,
    first_step,
    load_torch,
    malloc_note,
    mallopt,
    ms,
    run_blocks,
    run_child,
    traced_peak,
    uptime,
)

SINGA_MODES = ("eager", "graph-seq", "graph")
TORCH_MODES = ("torch", "torch-compile")


@dataclass(frozen=True)
class Spec:
    """A benchmarked network: description, zoo name, sample shape, default batch and
    default timed steps per block (fewer for the heavy ones)."""

    desc: str
    zoo_name: str
    shape: tuple
    batch: int = 64
    steps: int = 6


MODELS = {
    "mlp": Spec("MLP 784-100-10", "mlp", (784,), steps=20),
    "cnn": Spec("MNIST CNN", "cnn", (1, 28, 28), steps=6),
    "resnet8": Spec("ResNet-8 CIFAR", "resnet8", (3, 32, 32), steps=4),
    "resnet20": Spec("ResNet-20 CIFAR", "resnet20", (3, 32, 32), steps=3),
    "alexnet": Spec("AlexNet 32x32", "alexnet", (3, 32, 32), steps=2),
    "resnet18": Spec("ResNet-18 32x32", "resnet18", (3, 32, 32), batch=32, steps=2),
}
ALIASES = {"resnet": "resnet8"}


# ----- steps -----------------------------------------------------------------------------
def batch_arrays(batch: int, shape: tuple, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A fixed random float32 batch and int labels in 0..9."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch, *shape)).astype(np.float32), rng.integers(0, 10, batch).astype(
        np.int32
    )


def singa_model(name: str):
    """A fresh zoo model for ``name`` (seed 0), with SGD momentum 0.9, not compiled."""
    from singa import device, opt, zoo

    spec = MODELS[name]
    device.get_default_device().set_rand_seed(0)
    image = spec.shape[1:] if len(spec.shape) == 3 else None
    m = zoo.create(
        spec.zoo_name, num_classes=10, num_channels=spec.shape[0] if image else 1, image_size=image
    )
    m.set_optimizer(opt.SGD(0.01, momentum=0.9))
    return m


def singa_step(name: str, mode: str, batch: int) -> tuple[Step, object]:
    """A zero-argument training step of model ``name`` in ``mode`` (see SINGA_MODES)."""
    from singa import tensor

    spec = MODELS[name]
    m = singa_model(name)
    x, y = batch_arrays(batch, spec.shape)
    tx = tensor.Tensor((batch, *spec.shape), requires_grad=False)
    ty = tensor.Tensor((batch,), dtype=tensor.int32, requires_grad=False)
    m.compile([tx], is_train=True, use_graph=mode != "eager", sequential=mode == "graph-seq")
    tx.copy_from_numpy(x)
    ty.copy_from_numpy(y)
    return (lambda: m(tx, ty)), m


def singa_params(m) -> int:
    """Trainable parameter values of a compiled singa model."""
    return sum(t.size() for t in m.get_params().values())


def torch_step(name: str, batch: int, compiled: bool) -> tuple[Step, int]:
    """A zero-argument PyTorch training step of ``name`` (``torch.compile`` of the
    network when ``compiled``) and the network's parameter count."""
    import torch
    from _torch_models import build, count_params

    torch.manual_seed(0)
    net = build(MODELS[name].zoo_name)
    fwd = torch.compile(net) if compiled else net
    x, y = batch_arrays(batch, MODELS[name].shape)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y).long()
    sgd = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        sgd.zero_grad(set_to_none=True)
        loss_fn(fwd(xt), yt).backward()
        sgd.step()

    return step, count_params(net)


# ----- tracemalloc peak --------------------------------------------------------------------
def peak_memory(name: str, mode: str, batch: int, warmup: int = 3, steps: int = 3) -> tuple[float, float]:
    """(step peak, total peak) in MiB of a steady-state step (:func:`_harness.traced_peak`)."""
    return traced_peak(lambda: singa_step(name, mode, batch)[0], warmup, steps)


# ----- the timing run ------------------------------------------------------------------------
def build_steps(names: list[str], modes: list[str], batches: dict, compile_: bool, torch_ok: bool) -> tuple:
    """The steps to time, their first-step times and the parameter counts; a
    torch.compile that fails is reported and left out."""
    steps: dict[tuple[str, str], Step] = {}
    timings: dict[tuple[str, str], Timing] = {}
    params: dict[str, dict[str, int]] = {}
    for name in names:
        b = batches[name]
        for mode in modes:
            step, m = singa_step(name, mode, b)
            timings[(name, mode)] = Timing(first=first_step(step))
            params.setdefault(name, {})["singa"] = singa_params(m)
            steps[(name, mode)] = step
        if not torch_ok:
            continue
        for mode, compiled in (("torch", False), ("torch-compile", True)):
            if compiled and not compile_:
                continue
            step, n = torch_step(name, b, compiled)
            try:
                first = first_step(step)
            except Exception as e:  # torch.compile needs a C++ toolchain; any failure skips the row
                print(f"torch.compile of {name} failed, row skipped: {type(e).__name__}: {str(e)[:200]}")
                continue
            params[name]["torch"] = n
            timings[(name, mode)] = Timing(first=first)
            steps[(name, mode)] = step
    return steps, timings, params


def ratio(a: float, b: float | None) -> str:
    """a / b as '1.23x', or '-'."""
    return f"{a / b:.2f}x" if b else "-"


def count(n: int | None) -> str:
    """A count with thousands separators, or '-'."""
    return "-" if n is None else f"{n:,}"


def print_params(names: list[str], params: dict) -> None:
    """The parameter counts of ours and PyTorch's networks, side by side."""
    print("| model | parameters (singa) | parameters (torch) | match |")
    print("|---|---:|---:|---|")
    for name in names:
        p = params.get(name, {})
        ours, theirs = p.get("singa"), p.get("torch")
        match = "-" if theirs is None or ours is None else ("yes" if ours == theirs else "NO: MISMATCH")
        print(f"| {MODELS[name].desc} | {count(ours)} | {count(theirs)} | {match} |")
    print()


def print_table(names: list[str], modes: list[str], batches: dict, timings: dict, memory: dict) -> None:
    """The step-time table (markdown)."""
    print(
        "| model | batch | mode | first step s | median ms | min ms | CPU ms | vs torch | "
        "vs torch.compile | vs best torch | step peak MiB | total peak MiB |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in names:
        eager = timings.get((name, "torch"))
        comp = timings.get((name, "torch-compile"))
        t_eager = eager.median if eager and eager.wall else None
        t_comp = comp.median if comp and comp.wall else None
        best = min((t for t in (t_eager, t_comp) if t), default=None)
        for mode in (*modes, *TORCH_MODES):
            t = timings.get((name, mode))
            if t is None or not t.wall:
                continue
            mine = mode in SINGA_MODES
            cols = (
                [ratio(t.median, t_eager), ratio(t.median, t_comp), ratio(t.median, best)]
                if mine
                else ["-"] * 3
            )
            mem = memory.get((name, mode))
            memcols = [f"{mem[0]:.2f}", f"{mem[1]:.2f}"] if mem else ["-", "-"]
            print(
                f"| {MODELS[name].desc} | {batches[name]} | {mode} | {t.first:.2f} | {ms(t.median)} | "
                f"{ms(t.minimum)} | {ms(t.cpu_median)} | " + " | ".join(cols + memcols) + " |"
            )


# ----- peak RSS in fresh processes ----------------------------------------------------------------
def rss_run(args: argparse.Namespace, torch_ok: bool) -> int:
    """Peak RSS of ``--rss-steps`` training steps of ``--rss-model``, one fresh process
    per library and repetition, the libraries alternating."""
    name = resolve(args.rss_model)
    batch = args.batch or MODELS[name].batch
    libs = ["singa-graph", "singa-eager"]
    if torch_ok:
        libs.append("torch")
        if args.torch_compile:
            libs.append("torch-compile")
    child = os.path.join(HERE, "_rss_child.py")
    results: dict[str, list[dict]] = {lib: [] for lib in libs}
    for _ in range(args.rss_reps):
        for lib in libs:
            argv = [child, lib, MODELS[name].zoo_name, str(batch), str(args.rss_steps), str(args.threads)]
            try:
                results[lib].append(run_child(argv))
            except RuntimeError as e:
                print(f"{lib}: {e}")
    print(
        f"peak RSS (ru_maxrss, MB = 10^6 bytes) of {args.rss_steps} training steps of {MODELS[name].desc}, "
    )
    print(f"batch {batch}, a fresh process per library and repetition ({args.rss_reps} repetitions)")
    print()
    print("| library | after imports MB | after model built MB | after step 1 MB | peak MB | first step s |")
    print("|---|---:|---:|---:|---:|---:|")
    for lib, runs in results.items():
        if not runs:
            continue

        def col(key: str, runs: list = runs) -> str:
            vals = sorted(r[key] for r in runs)
            return (
                f"{vals[0]:.0f}" if vals[0] == vals[-1] or len(vals) == 1 else f"{vals[0]:.0f}-{vals[-1]:.0f}"
            )

        first = min(r["first_step_s"] for r in runs)
        print(
            f"| {lib} | {col('imports_mb')} | {col('built_mb')} | {col('step1_mb')} | "
            f"{col('peak_mb')} | {first:.2f} |"
        )
    return 0


# ----- main ------------------------------------------------------------------------------------
def resolve(name: str) -> str:
    """A model key, allowing the aliases (``resnet`` is ResNet-8)."""
    key = ALIASES.get(name, name)
    if key not in MODELS:
        raise SystemExit(f"unknown model {name!r}; known: {', '.join(MODELS)} (alias resnet = resnet8)")
    return key


def parse_batches(args: argparse.Namespace, names: list[str]) -> dict[str, int]:
    """Batch per model: ``--batch-for name=N`` beats ``--batch`` beats the model's default."""
    out = {n: args.batch or MODELS[n].batch for n in names}
    for item in filter(None, (s.strip() for s in args.batch_for.split(","))):
        key, _, value = item.partition("=")
        if not value.isdigit() or int(value) < 1:
            raise SystemExit(f"--batch-for: expected name=N with N >= 1, got {item!r}")
        out[resolve(key.strip())] = int(value)
    return out


def parser() -> argparse.ArgumentParser:
    """The command-line options."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {','.join(MODELS)}")
    ap.add_argument("--modes", default="eager,graph", help=f"our modes, from {','.join(SINGA_MODES)}")
    ap.add_argument(
        "--batch", type=int, default=None, help="batch of every model (default: 64, ResNet-18 32)"
    )
    ap.add_argument("--batch-for", default="", help="per-model batch, e.g. resnet18=32,alexnet=128")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per block (default: per model)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps before each block")
    ap.add_argument("--reps", type=int, default=8, help="rounds of alternating blocks")
    ap.add_argument("--pause", type=float, default=0.3, help="seconds of pause before each block")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--torch-compile", action="store_true", help="add torch.compile (inductor) rows")
    ap.add_argument("--no-memory", action="store_true", help="skip the tracemalloc peaks")
    ap.add_argument("--mallopt", action="store_true", help="set glibc M_TRIM/M_MMAP_THRESHOLD first")
    ap.add_argument("--rss", action="store_true", help="peak RSS mode (fresh process per library)")
    ap.add_argument("--rss-model", default="resnet20")
    ap.add_argument("--rss-steps", type=int, default=3)
    ap.add_argument("--rss-reps", type=int, default=2)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    names = [resolve(n.strip()) for n in args.models.split(",") if n.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if any(m not in SINGA_MODES for m in modes):
        raise SystemExit(f"--modes: choose from {', '.join(SINGA_MODES)}, got {args.modes!r}")
    used_mallopt = mallopt() if args.mallopt else False
    print(f"start: {uptime()}")
    if args.rss:
        rc = rss_run(args, not args.no_torch and importlib.util.find_spec("torch") is not None)
        print(f"\nend: {uptime()}")
        return rc
    torch_version = load_torch(args.threads, args.no_torch)
    batches = parse_batches(args, names)
    memory = {}
    if not args.no_memory:
        memory = {(n, m): peak_memory(n, m, batches[n]) for n in names for m in modes}
    steps, timings, params = build_steps(names, modes, batches, args.torch_compile, torch_version is not None)
    run_blocks(
        steps,
        args.reps,
        lambda key: args.steps or MODELS[key[0]].steps,
        warmup=args.warmup,
        pause=args.pause,
        timings=timings,
    )
    print(f"end:   {uptime()}")
    print(
        f"{args.reps} rounds of alternating blocks (pause {args.pause} s, {args.warmup} untimed step(s), "
        f"then {args.steps or 'per-model'} timed steps); times in ms, first step in s; memory: tracemalloc"
    )
    print(
        f"python {platform.python_version()}, numpy {np.__version__}, torch {torch_version or 'n/a'} "
        f"({args.threads} threads), cpus {os.cpu_count()}, OPENBLAS_NUM_THREADS "
        f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, malloc tuning {malloc_note(used_mallopt)}"
    )
    print()
    print_params(names, params)
    print_table(names, modes, batches, timings, memory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
