"""Graph-mode benchmark: Model API training steps, eager vs graph (sequential and
scheduled replay) vs PyTorch CPU, with peak memory.

One step = ``model(tx, ty)`` on a Model subclass built from singa.layer layers
(forward, softmax cross-entropy, backward, SGD momentum update); PyTorch runs the same
architecture with the same optimizer. All (model, mode) pairs are interleaved over
many short repetitions (default 12 x 6 steps), so that a burst of load from other
jobs on a shared machine falls on every mode alike; each repetition warms up, then
times ``--steps`` single steps. Times are the median and minimum over all timed
steps; ratios are medians divided by PyTorch's median.

Peak memory is measured separately (not timed) with tracemalloc, which numpy reports
its allocations to: the peak of traced memory during one steady-state step, as the
increase over the memory held at the start of the step ("step peak") and in total
("total peak": parameters, optimizer state, the operators' buffer pool and the
step's own arrays). PyTorch's allocator is not visible to tracemalloc, so it has no
memory column.

Usage::

    python bench/bench_graph.py                        # mlp, cnn, resnet; batch 64
    python bench/bench_graph.py --models cnn --reps 5
    python bench/bench_graph.py --mallopt              # glibc keeps freed memory
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import load_torch, mallopt  # noqa: E402

from singa import device, layer, model, opt, tensor  # noqa: E402

Step = Callable[[], object]
MODES = ("eager", "graph-seq", "graph")


# ----- singa models (Model API) ------------------------------------------------------------
class _Trainer(model.Model):
    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


class MLP(_Trainer):
    """MLP 784-100-10, ReLU."""

    def __init__(self):
        super().__init__()
        self.fc1 = layer.Linear(100)
        self.relu = layer.ReLU()
        self.fc2 = layer.Linear(10)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(x)))


class CNN(_Trainer):
    """MNIST CNN: conv5x5 1->32, ReLU, maxpool 2, conv5x5 32->64, ReLU, maxpool 2,
    flatten, linear 1024->500, ReLU, linear 500->10."""

    def __init__(self):
        super().__init__()
        self.conv1 = layer.Conv2d(32, 5)
        self.conv2 = layer.Conv2d(64, 5)
        self.pool = layer.MaxPool2d(2, 2)
        self.relu = layer.ReLU()
        self.flatten = layer.Flatten()
        self.fc1 = layer.Linear(500)
        self.fc2 = layer.Linear(10)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        y = self.pool(self.relu(self.conv1(x)))
        y = self.pool(self.relu(self.conv2(y)))
        return self.fc2(self.relu(self.fc1(self.flatten(y))))


class BasicBlock(layer.Layer):
    """conv3x3-BN-ReLU-conv3x3-BN plus the input (1x1 conv + BN when the shape
    changes), ReLU."""

    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = layer.Conv2d(cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = layer.BatchNorm2d()
        self.conv2 = layer.Conv2d(cout, 3, padding=1, bias=False)
        self.bn2 = layer.BatchNorm2d()
        self.relu = layer.ReLU()
        self.add = layer.Add()
        self.down = None
        if stride != 1 or cin != cout:
            self.down = layer.Conv2d(cout, 1, stride=stride, bias=False)
            self.down_bn = layer.BatchNorm2d()

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        skip = x if self.down is None else self.down_bn(self.down(x))
        return self.relu(self.add(y, skip))


class ResNet(_Trainer):
    """ResNet-8-style CIFAR net: conv3x3 16 + BN + ReLU, BasicBlocks 16, 32/2, 64/2,
    global average pool, linear 64->10."""

    def __init__(self):
        super().__init__()
        self.conv = layer.Conv2d(16, 3, padding=1, bias=False)
        self.bn = layer.BatchNorm2d()
        self.relu = layer.ReLU()
        self.blocks = [BasicBlock(16, 16), BasicBlock(16, 32, 2), BasicBlock(32, 64, 2)]
        self.gap = layer.GlobalAvgPool2d()
        self.flatten = layer.Flatten()
        self.fc = layer.Linear(10)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        y = self.relu(self.bn(self.conv(x)))
        for b in self.blocks:
            y = b(y)
        return self.fc(self.flatten(self.gap(y)))


# ----- torch models ----------------------------------------------------------------------
def torch_model(name: str):
    from torch import nn

    if name == "mlp":
        return nn.Sequential(nn.Linear(784, 100), nn.ReLU(), nn.Linear(100, 10))
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(1024, 500), nn.ReLU(), nn.Linear(500, 10),
        )  # fmt: skip

    class Block(nn.Module):
        def __init__(self, cin, cout, stride=1):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.bn2(self.conv2(self.bn1(self.conv1(x)).relu()))
            return (y + (x if self.down is None else self.down(x))).relu()

    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        Block(16, 16), Block(16, 32, 2), Block(32, 64, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    )  # fmt: skip


#: name -> (description, singa Model class, input shape)
MODELS = {
    "mlp": ("MLP 784-100-10", MLP, (784,)),
    "cnn": ("MNIST CNN", CNN, (1, 28, 28)),
    "resnet": ("ResNet-8 CIFAR", ResNet, (3, 32, 32)),
}


def _batch(batch: int, shape: tuple, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch, *shape)).astype(np.float32), rng.integers(0, 10, batch)


def singa_step(name: str, mode: str, batch: int) -> tuple[Step, model.Model]:
    """A zero-argument training step of model ``name`` in ``mode`` (see MODES)."""
    _, cls, shape = MODELS[name]
    device.get_default_device().set_rand_seed(0)
    m = cls()
    m.set_optimizer(opt.SGD(0.01, momentum=0.9))
    x, y = _batch(batch, shape)
    tx = tensor.Tensor((batch, *shape), requires_grad=False)
    ty = tensor.Tensor((batch,), dtype=tensor.int32, requires_grad=False)
    m.compile([tx], is_train=True, use_graph=mode != "eager", sequential=mode == "graph-seq")
    tx.copy_from_numpy(x)
    ty.copy_from_numpy(y)
    return (lambda: m(tx, ty)), m


def torch_step(name: str, batch: int) -> Step:
    import torch

    torch.manual_seed(0)
    net = torch_model(name)
    x, y = _batch(batch, MODELS[name][2])
    xt, yt = torch.tensor(x), torch.tensor(y)
    sgd = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        sgd.zero_grad(set_to_none=True)
        loss = loss_fn(net(xt), yt)
        loss.backward()
        sgd.step()

    return step


# ----- measuring ---------------------------------------------------------------------------
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


def peak_memory(name: str, mode: str, batch: int, warmup: int = 3, steps: int = 3) -> tuple[float, float]:
    """(step peak, total peak) in MiB of a steady-state step; see the module docstring.
    The operators' buffer pool is emptied first, so that every mode builds its own."""
    try:
        from singa.autograd.buffers import clear_scratch
    except ImportError:  # an older tree (before/after comparisons): the pool lived in _im2col
        from singa.autograd._im2col import clear_scratch
    clear_scratch()
    gc.collect()
    tracemalloc.start()
    try:
        step, m = singa_step(name, mode, batch)
        for _ in range(warmup):
            step()
        gc.collect()
        step_peaks, total_peaks = [], []
        for _ in range(steps):
            start = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            step()
            peak = tracemalloc.get_traced_memory()[1]
            step_peaks.append(peak - start)
            total_peaks.append(peak)
    finally:
        tracemalloc.stop()
    return min(step_peaks) / 2**20, min(total_peaks) / 2**20


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {','.join(MODELS)}")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=6, help="timed steps per repetition")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps before each repetition")
    ap.add_argument("--reps", type=int, default=12, help="interleaved repetitions")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--mallopt", action="store_true", help="set glibc M_TRIM/M_MMAP_THRESHOLD first")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; known: {list(MODELS)}")
    used_mallopt = mallopt() if args.mallopt else False
    torch_version = load_torch(args.threads, args.no_torch)

    memory = {}
    if not args.no_memory:
        for name in names:
            for mode in MODES:
                memory[(name, mode)] = peak_memory(name, mode, args.batch)

    steps: dict[tuple[str, str], Step] = {}
    for name in names:
        for mode in MODES:
            steps[(name, mode)] = singa_step(name, mode, args.batch)[0]
        if torch_version:
            steps[(name, "torch")] = torch_step(name, args.batch)
    times: dict[tuple[str, str], list[float]] = {k: [] for k in steps}
    for _ in range(args.reps):
        for key, step in steps.items():
            times[key] += time_steps(step, args.warmup, args.steps)

    print(
        f"batch {args.batch}; {args.reps} interleaved repetitions x {args.steps} timed steps after "
        f"{args.warmup} warm-up steps; times in ms; memory in MiB (tracemalloc)"
    )
    print(
        f"python {platform.python_version()}, numpy {np.__version__}, torch {torch_version or 'n/a'} "
        f"({args.threads} threads), cpus {os.cpu_count()}, malloc tuning "
        f"{'ON (mallopt)' if used_mallopt else 'OFF (glibc defaults)'}"
    )
    print()
    print("| model | mode | median | min | vs torch | step peak | total peak |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name in names:
        desc = MODELS[name][0]
        tmed = statistics.median(times[(name, "torch")]) if (name, "torch") in times else None
        for mode in (*MODES, "torch"):
            if (name, mode) not in times:
                continue
            ts = times[(name, mode)]
            med = statistics.median(ts)
            ratio = f"{med / tmed:.2f}x" if tmed else "-"
            mem = memory.get((name, mode))
            memcols = f"{mem[0]:.2f} | {mem[1]:.2f}" if mem else "- | -"
            print(f"| {desc} | {mode} | {med * 1e3:.2f} | {min(ts) * 1e3:.2f} | {ratio} | {memcols} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
