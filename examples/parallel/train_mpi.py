"""Data-parallel training over MPI ranks (SINGA's ``examples/cnn/train_mpi.py``).

    mpiexec -n 2 python examples/parallel/train_mpi.py cnn fashion-mnist-mini
    mpiexec -n 2 python examples/parallel/train_mpi.py cnn fashion-mnist-mini -d sparseTopK -s 0.05
    mpiexec -hostfile hosts -n 16 python examples/parallel/train_mpi.py resnet20 cifar10 --gpu

(Open MPI as root: add --allow-run-as-root.) ``-b`` is the batch of each rank; the
global batch is ``-b`` times the number of ranks.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import train_cnn  # noqa: E402

from singa import opt  # noqa: E402

DIST_OPTIONS = ["plain", "half", "partialUpdate", "sparseTopK", "sparseThreshold"]


def parser() -> argparse.ArgumentParser:
    """SINGA's command line of train_mpi.py (models and data sets of our zoo)."""
    p = argparse.ArgumentParser(description="Data-parallel training over MPI ranks.")
    p.add_argument("model", nargs="?", default="cnn", help="a zoo model (cnn, mlp, resnet20, ...)")
    p.add_argument("data", nargs="?", default="fashion-mnist-mini", help="a data set name")
    p.add_argument("-m", "--max-epoch", default=3, type=int, dest="max_epoch")
    p.add_argument("-b", "--batch-size", default=32, type=int, dest="batch_size", help="per rank")
    p.add_argument("-l", "--learning-rate", default=0.05, type=float, dest="lr")
    p.add_argument("-d", "--dist-option", default="plain", choices=DIST_OPTIONS, dest="dist_option")
    p.add_argument("-s", "--sparsification", default=0.05, type=float, dest="spars")
    p.add_argument("-g", "--disable-graph", action="store_false", dest="graph")
    p.add_argument("-v", "--log-verbosity", default=0, type=int, dest="verbosity")
    p.add_argument("--max-steps", default=None, type=int, help="stop after this many steps")
    p.add_argument("--gpu", action="store_true", help="one GPU per rank (NCCL)")
    return p


def main(argv: list[str] | None = None) -> float:
    args = parser().parse_args(argv)
    sgd = opt.SGD(lr=args.lr, momentum=0.9, weight_decay=1e-5)
    sgd = opt.DistOpt(sgd)
    return train_cnn.run(
        sgd.global_rank, sgd.world_size, sgd.local_rank, args.max_epoch, args.batch_size, args.model,
        args.data, sgd, args.graph, args.verbosity, args.dist_option, args.spars, args.max_steps, args.gpu,
    )  # fmt: skip


if __name__ == "__main__":
    main()
