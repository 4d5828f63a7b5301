"""The communicator of a data-parallel job: its ranks and the engines that move the
arrays (SINGA's ``singa.Communicator``).

Which engine carries an array is decided by the array: numpy arrays go through MPI
(mpi4py), cupy arrays through NCCL (cupy), created on first use. A process that no
MPI launcher started (and no ``SINGA_DIST=mpi`` in the environment) is a job of one
rank and never imports mpi4py, so a single-process run neither needs MPI nor can
hang waiting for peers. Started by ``mpiexec -n N`` (N > 1) without mpi4py, it raises
one error saying how to install it.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from singa.parallel import faults
from singa.parallel.engines import DIST_HINT, LocalEngine, MpiEngine, import_mpi, launched_world_size

__all__ = ["Communicator", "host_engine"]


def host_engine() -> Any:
    """The engine for CPU arrays of this process: MPI when launched by an MPI launcher
    with more than one process (or ``SINGA_DIST=mpi``), else a one-rank engine."""
    forced = os.environ.get("SINGA_DIST", "").lower() == "mpi"
    launched = launched_world_size()
    if launched <= 1 and not forced:
        return LocalEngine()
    try:
        import_mpi()
    except RuntimeError as e:
        raise RuntimeError(
            f"this process is one of {launched} started by an MPI launcher, but mpi4py is not "
            f"installed: {DIST_HINT}"
        ) from e
    engine = MpiEngine()
    return engine if engine.world_size > 1 or forced else LocalEngine()


class Communicator:
    """The ranks of the job and the engines for CPU and GPU arrays.

    Args:
        nccl_id: a :class:`~singa.parallel.nccl.NcclIdHolder` for a multiprocessing launch
            on GPUs (then ``local_rank`` and ``world_size`` are required), or None for
            an MPI launch (or a single process).
        local_rank, world_size: the multiprocessing launch's rank and size.
        buff_size: SINGA's communication buffer size in elements (kept for the API;
            buffers here are sized by what is sent).
    """

    def __init__(
        self,
        nccl_id: Any = None,
        local_rank: int | None = None,
        world_size: int | None = None,
        buff_size: int = 4194304,
    ):
        self.buff_size = int(buff_size)
        self._gpu: Any = None
        if nccl_id is not None:
            from singa.parallel.nccl import NcclEngine

            self._gpu = NcclEngine(nccl_id, local_rank, world_size)
            self.host: Any = None
            ranks = self._gpu
        else:
            self.host = host_engine()
            ranks = self.host
        self.world_size = int(ranks.world_size)
        self.global_rank = int(ranks.global_rank)
        self.local_rank = int(ranks.local_rank)
        if self.world_size > 1:
            faults.abort_on_exception(ranks)

    @property
    def engine(self) -> Any:
        """The engine that knows the ranks (MPI, NCCL or the one-rank engine)."""
        return self.host if self.host is not None else self._gpu

    def engine_for(self, array: Any) -> Any:
        """The engine that carries ``array``: MPI for numpy, NCCL for cupy arrays."""
        if isinstance(array, np.ndarray):
            if self.host is None:
                raise RuntimeError(
                    "DistOpt was made with an nccl_id (a GPU job) but got CPU arrays: put the model on "
                    "the GPU of local_rank, or launch with mpiexec for CPU training"
                )
            return self.host
        if self.world_size == 1:
            return self.host
        if self._gpu is None:
            from singa.parallel.nccl import NcclEngine

            self._gpu = NcclEngine()
        return self._gpu

    def wait(self) -> None:
        """Block until every queued collective has finished."""
        for e in (self.host, self._gpu):
            if e is not None:
                e.wait()

    def agree(self, flag: bool) -> bool:
        """True on every rank when any rank passes True (see :func:`singa.parallel.faults.agree`)."""
        return faults.agree(self.engine, flag)

    def sum_scalars(self, values: list) -> list:
        """Sums of a few numbers across the ranks."""
        return self.engine.sum_scalars(values)

    def abort(self, code: int = 1) -> None:
        """End every rank of the job."""
        self.engine.abort(code)

    def __repr__(self) -> str:
        return f"Communicator(rank {self.global_rank} of {self.world_size}, {self.engine!r})"
