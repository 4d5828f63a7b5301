"""Training-step benchmark: singa.autograd against PyTorch CPU.

One step = forward, softmax cross-entropy, backward and an SGD momentum update on a
fixed batch. Every (model, framework) pair runs blocks of steps, the blocks alternating over
``--reps`` rounds with a ``--pause`` before each (the method of
``../shared/perf-notes.md``); each block warms up and then times ``--steps`` single steps. The
table gives the median and minimum step time over all timed steps, samples/s (from
the median) and the ratio singa/torch of the medians.

Usage::

    python bench/bench_train.py                      # all models, batch 64
    python bench/bench_train.py --models cnn --reps 5
    python bench/bench_train.py --mallopt            # glibc keeps freed memory
    MALLOC_TRIM_THRESHOLD_=1000000000 MALLOC_MMAP_THRESHOLD_=1000000000 python bench/bench_train.py

Adding a model: write ``singa_<name>(batch, rng)`` and (optionally)
``torch_<name>(batch, rng)``, each returning a zero-argument callable that runs one
training step, and add the name to ``MODELS``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import load_torch, mallopt, run_blocks, uptime  # noqa: E402

from singa import autograd, opt  # noqa: E402
from singa.tensor import Tensor  # noqa: E402

Step = Callable[[], None]


# ----- singa models ------------------------------------------------------------------------
def _param(rng: np.random.Generator, shape: tuple, fan_in: int) -> Tensor:
    a = (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
    return Tensor(data=a, requires_grad=True, stores_grad=True)


def _zeros(shape: tuple) -> Tensor:
    return Tensor(shape=shape, requires_grad=True, stores_grad=True)


def _singa_step(forward: Callable[[], Tensor], lr: float = 0.01) -> Step:
    sgd = opt.SGD(lr, momentum=0.9)

    def step() -> None:
        autograd.training = True
        loss = forward()
        for p, g in autograd.backward(loss):
            sgd.update(p, g)

    return step


def _data(batch: int, shape: tuple, rng: np.random.Generator) -> tuple[Tensor, Tensor]:
    x = Tensor(data=rng.standard_normal((batch, *shape)).astype(np.float32), requires_grad=False)
    t = Tensor(data=rng.integers(0, 10, batch), dtype=np.int32, requires_grad=False)
    return x, t


def singa_mlp(batch: int, rng: np.random.Generator) -> Step:
    """MLP 784-100-10, ReLU."""
    x, t = _data(batch, (784,), rng)
    w1, b1 = _param(rng, (784, 100), 784), _zeros((100,))
    w2, b2 = _param(rng, (100, 10), 100), _zeros((10,))

    def forward() -> Tensor:
        h = autograd.relu(autograd.add_bias(autograd.matmul(x, w1), b1))
        y = autograd.add_bias(autograd.matmul(h, w2), b2)
        return autograd.softmax_cross_entropy(y, t)

    return _singa_step(forward)


def singa_cnn(batch: int, rng: np.random.Generator) -> Step:
    """MNIST CNN: conv5x5 1->32, ReLU, maxpool 2, conv5x5 32->64, ReLU, maxpool 2,
    flatten, linear 1024->500, ReLU, linear 500->10."""
    x, t = _data(batch, (1, 28, 28), rng)
    c1, cb1 = _param(rng, (32, 1, 5, 5), 25), _zeros((32,))
    c2, cb2 = _param(rng, (64, 32, 5, 5), 800), _zeros((64,))
    w3, b3 = _param(rng, (1024, 500), 1024), _zeros((500,))
    w4, b4 = _param(rng, (500, 10), 500), _zeros((10,))

    def forward() -> Tensor:
        h = autograd.max_pool_2d(autograd.relu(autograd.conv2d(x, c1, cb1)), 2)
        h = autograd.max_pool_2d(autograd.relu(autograd.conv2d(h, c2, cb2)), 2)
        h = autograd.reshape(h, (batch, -1))
        h = autograd.relu(autograd.add_bias(autograd.matmul(h, w3), b3))
        y = autograd.add_bias(autograd.matmul(h, w4), b4)
        return autograd.softmax_cross_entropy(y, t)

    return _singa_step(forward)


# ----- torch models ------------------------------------------------------------------------
def _torch_step(model, batch: int, shape: tuple, rng: np.random.Generator) -> Step:
    import torch

    x = torch.tensor(rng.standard_normal((batch, *shape)).astype(np.float32))
    t = torch.tensor(rng.integers(0, 10, batch))
    sgd = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        sgd.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), t)
        loss.backward()
        sgd.step()

    return step


def torch_mlp(batch: int, rng: np.random.Generator) -> Step:
    from torch import nn

    model = nn.Sequential(nn.Linear(784, 100), nn.ReLU(), nn.Linear(100, 10))
    return _torch_step(model, batch, (784,), rng)


def torch_cnn(batch: int, rng: np.random.Generator) -> Step:
    from torch import nn

    model = nn.Sequential(
        nn.Conv2d(1, 32, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(1024, 500),
        nn.ReLU(),
        nn.Linear(500, 10),
    )
    return _torch_step(model, batch, (1, 28, 28), rng)


#: name -> (description, singa builder, torch builder or None)
MODELS: dict[str, tuple[str, Callable[..., Step], Callable[..., Step] | None]] = {
    "mlp": ("MLP 784-100-10", singa_mlp, torch_mlp),
    "cnn": ("MNIST CNN", singa_cnn, torch_cnn),
}


# ----- harness -----------------------------------------------------------------------------
def _malloc_state(used_mallopt: bool) -> str:
    env = {k: os.environ[k] for k in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_") if k in os.environ}
    if used_mallopt:
        return "ON (mallopt M_TRIM_THRESHOLD = M_MMAP_THRESHOLD = 1 GiB, set by this script)"
    if env:
        return "ON (environment: " + ", ".join(f"{k}={v}" for k, v in env.items()) + ")"
    return "OFF (glibc defaults; singa pools its own convolution scratch buffers)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {','.join(MODELS)}")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=30, help="timed steps per repetition")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps before each repetition")
    ap.add_argument("--reps", type=int, default=3, help="interleaved repetitions")
    ap.add_argument("--pause", type=float, default=0.3, help="seconds of pause before each block")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    ap.add_argument("--no-torch", action="store_true", help="skip PyTorch even when installed")
    ap.add_argument("--mallopt", action="store_true", help="set glibc M_TRIM/M_MMAP_THRESHOLD first")
    args = ap.parse_args(argv)

    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; known: {list(MODELS)}")
    used_mallopt = mallopt() if args.mallopt else False

    print(f"start: {uptime()}")
    torch_version = load_torch(args.threads, args.no_torch)

    steps: dict[tuple[str, str], Step] = {}
    for name in names:
        _, make_singa, make_torch = MODELS[name]
        steps[(name, "singa")] = make_singa(args.batch, np.random.default_rng(0))
        if torch_version and make_torch is not None:
            steps[(name, "torch")] = make_torch(args.batch, np.random.default_rng(0))

    timings = run_blocks(steps, args.reps, args.steps, warmup=args.warmup, pause=args.pause)
    times = {key: t.wall for key, t in timings.items()}
    print(f"end:   {uptime()}")
    print(
        f"batch {args.batch}; {args.reps} rounds of alternating blocks (pause {args.pause} s) of "
        f"{args.steps} timed steps after {args.warmup} warm-up steps each; times in ms"
    )
    print(
        f"python {platform.python_version()}, numpy {np.__version__}, "
        f"torch {torch_version or 'not available'} ({args.threads} threads), cpus {os.cpu_count()}"
    )
    print(f"malloc tuning: {_malloc_state(used_mallopt)}")
    print()
    head = f"{'model':<16} {'framework':<9} {'median':>8} {'min':>8} {'samples/s':>10} {'singa/torch':>11}"
    print(head)
    print("-" * len(head))
    for name in names:
        desc = MODELS[name][0]
        med = {f: statistics.median(times[(name, f)]) for f in ("singa", "torch") if (name, f) in times}
        for fw in ("singa", "torch"):
            if (name, fw) not in times:
                continue
            ts = times[(name, fw)]
            ratio = f"{med['singa'] / med['torch']:.2f}x" if fw == "singa" and "torch" in med else ""
            print(
                f"{desc:<16} {fw:<9} {med[fw] * 1e3:8.2f} {min(ts) * 1e3:8.2f} "
                f"{args.batch / med[fw]:10.0f} {ratio:>11}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
