"""``Model.fit`` data-parallel: run under ``mpiexec -n 2 python fit_worker.py OUT`` each
rank trains on its shard with a DistOpt and writes ``OUT/fit_rank<r>.npz``; imported by
the test, :func:`train` with ``distributed=False`` is the one-process reference at the
global batch."""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from singa import data, opt  # noqa: E402
from tests.fit.fit_helpers import classification, made  # noqa: E402

GLOBAL_BATCH = 16


def train(distributed: bool) -> dict:
    """Two epochs of fit with validation; the parameters and the history."""
    x, y = classification(96)
    xv, yv = classification(40, seed=1)
    m = made(momentum=0.9)
    replicas, rank, batch = 1, 0, GLOBAL_BATCH
    if distributed:
        m.set_optimizer(opt.DistOpt(opt.SGD(0.1, momentum=0.9)))
        replicas, rank, batch = m.optimizer.world_size, m.optimizer.global_rank, GLOBAL_BATCH // 2
    train_data = data.DataLoader(x, y, batch, shuffle=True, seed=0, num_replicas=replicas, rank=rank)
    val = data.DataLoader(xv, yv, 8, num_replicas=replicas, rank=rank)
    h = m.fit(train_data, epochs=2, validation_data=val, verbose=0)
    out = {f"param/{k}": v.to_numpy() for k, v in m.get_states().items()}
    out.update({f"history/{k}": np.asarray(v) for k, v in h.history.items() if k != "samples_per_s"})
    return out


class RankClock:
    """A fake clock: one second per read on rank 0, two on the others."""

    def __init__(self, rank: int):
        self.t, self.step = -1.0, 1.0 if rank == 0 else 2.0

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def train_budget(rank: int) -> dict:
    """fit with a TimeBudget whose clock runs twice as fast on rank 1: the ranks must
    still stop at the same step with one schedule."""
    from singa import callbacks

    x, y = classification(96)
    m = made(momentum=0.9)
    m.set_optimizer(opt.DistOpt(opt.SGD(opt.CosineDecay(0.1, decay_steps=60), momentum=0.9)))
    world = m.optimizer.world_size
    loader = data.DataLoader(x, y, GLOBAL_BATCH // world, shuffle=True, seed=0, num_replicas=world, rank=rank)
    budget = callbacks.TimeBudget(20, estimate_after=3, every=3, clock=RankClock(rank))
    m.fit(loader, epochs=10, verbose=0, callbacks=[budget])
    out = {f"param/{k}": v.to_numpy() for k, v in m.get_states().items()}
    out["steps"] = np.asarray(m.optimizer.opt.steps)
    out["decay_steps"] = np.asarray(m.optimizer.opt.lr.decay_steps)
    return out


if __name__ == "__main__":
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
    np.savez(os.path.join(sys.argv[1], f"fit_rank{rank}.npz"), **train(distributed=True))
    np.savez(os.path.join(sys.argv[1], f"budget_rank{rank}.npz"), **train_budget(rank))
