"""Tiny training runs shared by the distributed tests: imported by the tests (the
one-process reference) and run under ``mpiexec`` (the ranks).

Global batch ``j`` is samples ``[j*G, (j+1)*G)`` of a fixed synthetic data set;
rank ``r`` of ``N`` trains on its ``G/N`` slice, so N ranks and one process see the
same global batches.

Usage under mpiexec: ``python dist_worker.py OUT_DIR`` runs every case of
:data:`CASES` and writes ``OUT_DIR/<case>_rank<r>.npz``;
``python dist_worker.py --fail {raise,kill} OUT_DIR`` makes rank 1 fail at step 2.
"""

from __future__ import annotations

import os
import signal
import sys

import numpy as np

from singa import device, opt, tensor, zoo

GLOBAL_BATCH = 16
STEPS = 6
SPARS = {"sparseTopK": 0.1, "sparseThreshold": 0.01}

#: name -> (optimizer, dist_option, graph mode)
CASES = {
    "sgd_eager": ("sgd", "plain", False),
    "sgd_graph": ("sgd", "plain", True),
    "adam_eager": ("adam", "plain", False),
    "adam_graph": ("adam", "plain", True),
    "half_eager": ("sgd", "half", False),
    "half_graph": ("sgd", "half", True),
    "partial_eager": ("sgd", "partialUpdate", False),
    "partial_graph": ("sgd", "partialUpdate", True),
    "topk_eager": ("sgd", "sparseTopK", False),
    "topk_graph": ("sgd", "sparseTopK", True),
    "threshold_eager": ("sgd", "sparseThreshold", False),
    "threshold_graph": ("sgd", "sparseThreshold", True),
    "sgd_seeded": ("sgd", "plain", False),  # each rank initialised from its own seed
}
SEEDED_BY_RANK = {"sgd_seeded"}

#: mixed precision (loss scaling) cases: name -> (graph mode, overflow); with overflow,
#: rank 1's batch of step OVERFLOW_STEP is multiplied by 1e30 (inf once cast to float16)
MIXED_CASES = {
    "mixed_eager": (False, False),
    "mixed_graph": (True, False),
    "mixed_overflow_eager": (False, True),
    "mixed_overflow_graph": (True, True),
}
OVERFLOW_STEP = 2


def dataset(n: int = GLOBAL_BATCH * STEPS) -> tuple[np.ndarray, np.ndarray]:
    """Noise images with one brighter quadrant; the class is that quadrant."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, 1, 16, 16)).astype(np.float32)
    y = rng.integers(0, 4, n).astype(np.int32)
    for i, c in enumerate(y):
        r, q = divmod(int(c), 2)
        x[i, 0, 8 * r : 8 * r + 8, 8 * q : 8 * q + 8] += 1.0
    return x, y


def full_loss(model, dev) -> float:
    """The mean loss over the whole data set (evaluation mode)."""
    x, y = dataset()
    model.eval()
    out = model(tensor.from_numpy(x, dev))
    model.train()
    loss = model.softmax_cross_entropy(out, tensor.from_numpy(y, dev))
    return float(loss)


def make_optimizer(kind: str) -> opt.Optimizer:
    """SGD with momentum, or Adam with a decaying schedule."""
    if kind == "sgd":
        return opt.SGD(0.05, momentum=0.9)
    return opt.Adam(opt.ExponentialDecay(0.01, 2, 0.9))


def train(
    kind: str,
    option: str,
    graph: bool,
    distributed: bool,
    seed_by_rank: bool = False,
    precision: str = "float32",
    overflow: bool = False,
) -> dict:
    """Train the tiny CNN for :data:`STEPS` steps; returns its parameters and losses.
    ``distributed`` wraps the optimizer in a DistOpt and takes this rank's slice;
    ``seed_by_rank`` initialises rank r from seed r (DistOpt takes rank 0's values);
    ``overflow`` blows up rank 1's batch at :data:`OVERFLOW_STEP`."""
    dev = device.get_default_device()
    optimizer = make_optimizer(kind)
    rank, world = 0, 1
    if distributed:
        optimizer = opt.DistOpt(optimizer)
        rank, world = optimizer.global_rank, optimizer.world_size
    dev.set_rand_seed(rank if seed_by_rank else 0)
    model = zoo.create("cnn", num_classes=4, num_channels=1, kernels=(4, 8), hidden=16)
    b = GLOBAL_BATCH // world
    model.set_optimizer(optimizer)
    x, y = dataset()
    tx = tensor.from_numpy(x[:b], dev)
    model.compile([tx], is_train=True, use_graph=graph, sequential=False, precision=precision)
    init_sum = sum(float(abs(t.to_numpy()).sum()) for t in model.get_params().values())
    losses = []
    before = full_loss(model, dev)
    for j in range(STEPS):
        lo = j * GLOBAL_BATCH + rank * b
        xb = x[lo : lo + b]
        if overflow and rank == 1 and j == OVERFLOW_STEP:
            xb = xb * np.float32(1e30)
        tx = tensor.from_numpy(xb, dev)
        ty = tensor.from_numpy(y[lo : lo + b], dev)
        _, loss = model(tx, ty, option, SPARS.get(option))
        losses.append(float(loss))
    out = {f"param/{n}": t.to_numpy() for n, t in model.get_params().items()}
    out["losses"] = np.asarray(losses)
    out["loss_before"] = np.asarray(before)
    out["loss_after"] = np.asarray(full_loss(model, dev))
    out["world"] = np.asarray(world)
    out["rank"] = np.asarray(rank)
    out["init_sum"] = np.asarray(init_sum)
    scaler = optimizer.loss_scaler
    if scaler is not None:
        out["scale"] = np.asarray(scaler.scale)
        out["skipped_steps"] = np.asarray(scaler.skipped_steps)
    return out


def fail(how: str) -> None:
    """Train with rank 1 failing at step 2: by an exception or by SIGKILL."""
    dev = device.get_default_device()
    dev.set_rand_seed(0)
    model = zoo.create("mlp", num_classes=4, num_channels=1)
    optimizer = opt.DistOpt(opt.SGD(0.05))
    model.set_optimizer(optimizer)
    x, y = dataset()
    model.compile([tensor.from_numpy(x[:8], dev)], is_train=True)
    for j in range(1000):
        if j == 2 and optimizer.global_rank == 1:
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError("rank one fails on purpose")
        model(tensor.from_numpy(x[:8], dev), tensor.from_numpy(y[:8], dev))


def main(argv: list[str]) -> None:
    if argv[0] == "--fail":
        fail(argv[1])
        return
    out_dir = argv[0]
    for name, (kind, option, graph) in CASES.items():
        res = train(kind, option, graph, distributed=True, seed_by_rank=name in SEEDED_BY_RANK)
        np.savez(os.path.join(out_dir, f"{name}_rank{int(res['rank'])}.npz"), **res)
    for name, (graph, overflow) in MIXED_CASES.items():
        res = train("sgd", "plain", graph, distributed=True, precision="mixed", overflow=overflow)
        np.savez(os.path.join(out_dir, f"{name}_rank{int(res['rank'])}.npz"), **res)


if __name__ == "__main__":
    main(sys.argv[1:])
