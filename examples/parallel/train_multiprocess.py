"""Data-parallel training on the GPUs of one machine, ranks started by Python's
multiprocessing and joined by an NCCL id (SINGA's ``examples/cnn/train_multiprocess.py``).

    python examples/parallel/train_multiprocess.py cnn fashion-mnist-mini -w 2

Needs cupy with NCCL and ``-w`` GPUs (``pip install '.[gpu]'``); for CPUs use
``train_mpi.py`` under mpiexec.
"""

from __future__ import annotations

import multiprocessing
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import train_cnn  # noqa: E402
import train_mpi  # noqa: E402

from singa import opt  # noqa: E402
from singa import singa_wrap as singa  # noqa: E402
from singa.parallel.launch import join_processes  # noqa: E402


def run(args, local_rank: int, world_size: int, nccl_id) -> None:
    """One rank: its DistOpt joins the others through ``nccl_id``."""
    sgd = opt.SGD(lr=args.lr, momentum=0.9, weight_decay=1e-5)
    sgd = opt.DistOpt(sgd, nccl_id=nccl_id, local_rank=local_rank, world_size=world_size)
    train_cnn.run(
        sgd.global_rank, sgd.world_size, sgd.local_rank, args.max_epoch, args.batch_size, args.model,
        args.data, sgd, args.graph, args.verbosity, args.dist_option, args.spars, args.max_steps, gpu=True,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = train_mpi.parser()
    p.add_argument("-w", "--world-size", default=2, type=int, dest="world_size", help="number of GPUs")
    args = p.parse_args(argv)
    nccl_id = singa.NcclIdHolder()  # one id for the whole job, made before the children
    ctx = multiprocessing.get_context("spawn")  # CUDA cannot be forked
    procs = [
        ctx.Process(target=run, args=(args, r, args.world_size, nccl_id)) for r in range(args.world_size)
    ]
    for proc in procs:
        proc.start()
    codes = join_processes(procs)  # one rank failing ends the others (NCCL cannot tell)
    failed = [r for r, code in enumerate(codes) if code != 0]
    for r in failed:
        print(f"train_multiprocess: rank {r} exited with status {codes[r]}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
