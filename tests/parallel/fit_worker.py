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


if __name__ == "__main__":
    res = train(distributed=True)
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
    np.savez(os.path.join(sys.argv[1], f"fit_rank{rank}.npz"), **res)
