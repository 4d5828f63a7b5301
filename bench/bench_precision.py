"""Training-step time and peak memory of the three precisions (float32, mixed,
float16) on the CPU, side by side with PyTorch (float32 and ``torch.autocast``) when
it is installed.

One step = ``model(tx, ty)`` on a zoo model in graph mode (``--eager`` for eager):
forward, softmax cross-entropy, ``self.optimizer(loss)`` (SGD momentum 0.9; under
"mixed" with dynamic loss scaling). Runs of every (model, precision) pair are
interleaved over ``--reps`` repetitions of ``--warmup`` untimed and ``--steps`` timed
steps; the table gives the median and minimum over all timed steps.

Peak memory is measured separately with tracemalloc (numpy reports its allocations to
it): "step peak" is the most memory a steady-state step allocates above what is live
before it, "total peak" includes the parameters, optimizer state and buffer pool.

What to expect on a CPU: numpy has no float16 arithmetic units to use, so float16
arrays are converted element by element inside every ufunc, and matrix products must
run in float32 (see singa.model.precision); mixed and float16 steps are slower than
float32 here. Their gains (tensor cores, half the memory traffic) are on GPUs.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _harness import load_torch, mallopt, traced_peak  # noqa: E402

from singa import device, opt, tensor, zoo  # noqa: E402

PRECISIONS = ("float32", "mixed", "float16")
#: model -> (zoo name, input shape (C, H, W))
MODELS = {"cnn": ("cnn", (1, 28, 28)), "resnet": ("resnet20", (3, 32, 32))}

Step = Callable[[], object]


def _batch(batch: int, shape: tuple) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((batch, *shape)).astype(np.float32), rng.integers(0, 10, batch).astype(
        np.int32
    )


def singa_step(name: str, precision: str, batch: int, graph: bool) -> Step:
    """A zero-argument training step of model ``name`` under ``precision``."""
    zname, shape = MODELS[name]
    device.get_default_device().set_rand_seed(0)
    m = zoo.create(zname, num_classes=10, num_channels=shape[0], image_size=shape[1:])
    m.set_optimizer(opt.SGD(0.01, momentum=0.9))
    x, y = _batch(batch, shape)
    tx = tensor.Tensor((batch, *shape), requires_grad=False)
    ty = tensor.Tensor((batch,), dtype=tensor.int32, requires_grad=False)
    m.compile([tx], is_train=True, use_graph=graph, precision=precision)
    tx.copy_from_numpy(x)
    ty.copy_from_numpy(y)
    return lambda: m(tx, ty)


def torch_step(name: str, precision: str, batch: int) -> Step:
    """The same step in PyTorch: float32, or ``torch.autocast("cpu", float16)`` with a
    GradScaler for "mixed"."""
    import torch
    import torch.nn.functional as F

    zname, shape = MODELS[name]
    if name != "cnn":
        raise ValueError("torch: only the cnn is written")
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(1024, 500), torch.nn.ReLU(), torch.nn.Linear(500, 10),
    )  # fmt: skip
    x, y = _batch(batch, shape)
    xt, yt = torch.tensor(x), torch.tensor(y).long()
    sgd = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    mixed = precision == "mixed"
    scaler = torch.amp.GradScaler("cpu", enabled=mixed)

    def step() -> None:
        sgd.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.float16, enabled=mixed):
            loss = F.cross_entropy(net(xt), yt)
        scaler.scale(loss).backward()
        scaler.step(sgd)
        scaler.update()

    return step


def time_steps(step: Step, warmup: int, steps: int) -> list[float]:
    """Wall times of ``steps`` calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        step()
    out = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        out.append(time.perf_counter() - t0)
    return out


def peak_memory(make: Callable[[], Step], warmup: int = 2, steps: int = 2) -> tuple[float, float]:
    """(step peak, total peak) in MiB of a steady-state step (see the module docstring)."""
    return traced_peak(make, warmup, steps)


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="cnn", help=f"comma-separated, from {','.join(MODELS)}")
    ap.add_argument("--precisions", default=",".join(PRECISIONS))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=5, help="timed steps per repetition")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps before each repetition")
    ap.add_argument("--reps", type=int, default=4, help="interleaved repetitions")
    ap.add_argument("--eager", action="store_true", help="eager instead of graph mode")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--mallopt", action="store_true", help="set glibc M_TRIM/M_MMAP_THRESHOLD first")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    tuned = mallopt() if args.mallopt else False
    torch_version = load_torch(args.threads, args.no_torch)
    names = [n for n in args.models.split(",") if n]
    precs = [p for p in args.precisions.split(",") if p]
    steps: dict[tuple, Step] = {}
    for name in names:
        for p in precs:
            steps[(name, "singa", p)] = singa_step(name, p, args.batch, not args.eager)
            if torch_version and name == "cnn" and p != "float16":
                steps[(name, "torch", p)] = torch_step(name, p, args.batch)
    times: dict[tuple, list[float]] = {k: [] for k in steps}
    for _ in range(args.reps):
        for k, step in steps.items():
            times[k] += time_steps(step, args.warmup, args.steps)
    print(
        f"# numpy {np.__version__}, torch {torch_version or 'not installed'}, batch {args.batch}, "
        f"{'eager' if args.eager else 'graph'}, {args.reps} x {args.steps} timed steps, "
        f"mallopt {'on' if tuned else 'off'}; times in ms, memory in MiB (tracemalloc)"
    )
    print("| model | framework | precision | median | min | vs float32 | step peak | total peak |")
    print("|---|---|---|---|---|---|---|---|")
    for (name, fw, p), ts in times.items():
        base = statistics.median(times.get((name, fw, "float32"), ts))
        mem = "n/a | n/a"
        if fw == "singa" and not args.no_memory:
            step_peak, total = peak_memory(functools.partial(singa_step, name, p, args.batch, not args.eager))
            mem = f"{step_peak:.1f} | {total:.1f}"
        med = statistics.median(ts)
        print(f"| {name} | {fw} | {p} | {med * 1e3:.1f} | {min(ts) * 1e3:.1f} | {med / base:.2f}x | {mem} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
