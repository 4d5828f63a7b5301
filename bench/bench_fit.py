"""fit's per-step overhead over a hand-written loop (MLP and CNN, graph mode).

Both sides train the same model (same initial weights) on the same arrays, one epoch
of ``--steps`` batches per timed block: the hand-written loop converts each batch to
Tensors, calls the model (its ``train_one_batch``) and reads the loss as a float;
``fit(x, y, epochs=1, verbose=0)`` does the same plus what it adds (the batching, the
callbacks' hooks, the epoch's float64 metrics, the validation-free epoch logs). The
blocks alternate over ``--reps`` rounds with a ``--pause`` before each (the method of
``../shared/perf-notes.md``); the table gives the median and minimum time per step of
each side, the overhead of fit over the hand loop from the medians and from the minima,
and from the median process CPU time per block (less disturbed by other jobs than wall
time on a shared machine).

Usage::

    python bench/bench_fit.py                       # mlp and cnn, batch 64, 50 steps, 5 rounds
    python bench/bench_fit.py --models cnn --reps 9
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import ms, run_blocks, uptime  # noqa: E402

from singa import device, layer, model, opt, tensor  # noqa: E402
from singa.model.batches import ArrayBatches  # noqa: E402


class MLP(model.Model):
    """784 -> 256 -> ReLU -> 10."""

    def __init__(self) -> None:
        super().__init__()
        self.l1 = layer.Linear(256)
        self.relu = layer.ReLU()
        self.l2 = layer.Linear(10)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x: tensor.Tensor) -> tensor.Tensor:
        return self.l2(self.relu(self.l1(x)))

    def train_one_batch(self, x: tensor.Tensor, y: tensor.Tensor) -> tuple:
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


class CNN(model.Model):
    """conv 16 -> ReLU -> pool -> conv 32 -> ReLU -> pool -> linear 10 (28x28 input)."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = layer.Conv2d(16, 3, padding=1)
        self.c2 = layer.Conv2d(32, 3, padding=1)
        self.relu1 = layer.ReLU()
        self.relu2 = layer.ReLU()
        self.p1 = layer.MaxPool2d(2)
        self.p2 = layer.MaxPool2d(2)
        self.flat = layer.Flatten()
        self.fc = layer.Linear(10)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x: tensor.Tensor) -> tensor.Tensor:
        y = self.p1(self.relu1(self.c1(x)))
        y = self.p2(self.relu2(self.c2(y)))
        return self.fc(self.flat(y))

    def train_one_batch(self, x: tensor.Tensor, y: tensor.Tensor) -> tuple:
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


MODELS = {"mlp": (MLP, (784,)), "cnn": (CNN, (1, 28, 28))}


def _make(name: str, batch: int) -> model.Model:
    cls, shape = MODELS[name]
    device.get_default_device().set_rand_seed(0)
    m = cls()
    m.set_optimizer(opt.SGD(0.01, momentum=0.9))
    m.compile([tensor.Tensor((batch, *shape))], is_train=True, use_graph=True)
    return m


def epochs(name: str, batch: int, steps: int) -> tuple[dict[str, Callable[[], None]], dict[str, model.Model]]:
    """One zero-argument callable per side, each training one epoch of ``steps`` batches,
    and each side's model."""
    shape = MODELS[name][1]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch * steps, *shape)).astype(np.float32)
    y = rng.integers(0, 10, batch * steps).astype(np.int32)
    hand_model, fit_model = _make(name, batch), _make(name, batch)
    dev = device.get_default_device()
    loader = ArrayBatches(x, y, batch, shuffle=True, seed=0)

    def hand() -> None:
        loader.set_epoch(0)  # as fit(..., epochs=1) does: the same seeded order every block
        for xb, yb in loader:
            _, loss = hand_model(tensor.from_numpy(xb, dev), tensor.from_numpy(yb, dev))
            float(loss.to_numpy().reshape(-1)[0])

    def fit() -> None:
        fit_model.fit(x, y, batch_size=batch, epochs=1, seed=0, verbose=0)

    return {"hand loop": hand, "fit": fit}, {"hand loop": hand_model, "fit": fit_model}


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=50, help="batches per timed epoch")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1, help="untimed epochs before each block")
    ap.add_argument("--pause", type=float, default=0.3)
    args = ap.parse_args(argv)
    print(f"# fit overhead: batch {args.batch}, {args.steps} steps per epoch, {args.reps} rounds")
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cpus; {uptime()}")
    head = [
        "model",
        "hand loop ms/step (median, min)",
        "fit ms/step (median, min)",
        "overhead (median, min)",
        "CPU",
    ]
    print("| " + " | ".join(head) + " |")
    print("|---" * len(head) + "|")
    for name in args.models.split(","):
        sides, _ = epochs(name, args.batch, args.steps)
        t = run_blocks(sides, args.reps, 1, warmup=args.warmup, pause=args.pause)
        hand, fit = (t[k] for k in ("hand loop", "fit"))
        per = args.steps
        over, over_min = fit.median / hand.median - 1, fit.minimum / hand.minimum - 1
        cpu = fit.cpu_median / hand.cpu_median - 1
        cells = [
            name,
            f"{ms(hand.median / per)}, {ms(hand.minimum / per)}",
            f"{ms(fit.median / per)}, {ms(fit.minimum / per)}",
            f"{100 * over:+.1f}%, {100 * over_min:+.1f}%",
            f"{100 * cpu:+.1f}%",
        ]
        print("| " + " | ".join(cells) + " |")
    print(f"# after: {uptime()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
