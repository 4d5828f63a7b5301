"""Communication engines: who the ranks are and how arrays are summed across them.

An engine is the small interface that :class:`singa.opt.DistOpt` and the
collectives of :mod:`singa.parallel.collectives` are written against:

- ``world_size``, ``global_rank``, ``local_rank`` (the rank among the processes of
  this machine, which picks the GPU);
- ``allreduce(buf)``: sum a contiguous array across the ranks, in place;
- ``broadcast(buf)``: overwrite a contiguous array, in place, with rank 0's;
- ``allgather(buf)``: a new array of shape ``(world_size, *buf.shape)`` holding every
  rank's ``buf``;
- ``sum_scalars(values)``: the sum of a few Python numbers across ranks (bookkeeping,
  off the hot path);
- ``wait()``: block until queued communication has finished; ``abort(code)``: end
  every rank of the job.

:class:`LocalEngine` is a job of one process (every collective is the identity).
:class:`MpiEngine` uses mpi4py's buffer-based collectives (``Allreduce`` in place on
the array's memory, no pickling) on CPU arrays; float16 is summed by a user-defined
MPI operation (MPI has no half-precision type). The NCCL engine for GPU arrays is in
:mod:`singa.parallel.nccl`.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

__all__ = ["LocalEngine", "MpiEngine", "DIST_HINT", "launched_world_size", "import_mpi"]

#: how to get the distributed extra (said by every error about a missing MPI)
DIST_HINT = "install the distributed extra: pip install '.[dist]' (or pip install 'singa[dist]')"

#: environment variables that MPI launchers set to the number of processes
_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS")


def launched_world_size() -> int:
    """The number of processes an MPI launcher started this one among (1 when this
    process was not started by ``mpiexec``); read from the launcher's environment, so
    it works without mpi4py."""
    for var in _SIZE_VARS[:3]:
        v = os.environ.get(var)
        if v and v.isdigit():
            return int(v)
    return 1


def import_mpi() -> Any:
    """``mpi4py.MPI`` (initialising MPI), or a RuntimeError saying how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise RuntimeError(f"distributed training needs mpi4py and an MPI runtime: {DIST_HINT}") from e
    return MPI


class LocalEngine:
    """A job of one process: every collective leaves its input as it is."""

    world_size = 1
    global_rank = 0
    local_rank = 0

    def allreduce(self, buf: Any) -> Any:
        """The sum over one rank: ``buf`` itself."""
        return buf

    def broadcast(self, buf: Any) -> Any:
        """``buf`` itself (rank 0's values are this process's)."""
        return buf

    def allgather(self, buf: Any) -> Any:
        """``buf`` with a leading axis of length 1."""
        return buf[None].copy()

    def sum_scalars(self, values: list) -> list:
        """The values themselves."""
        return list(values)

    def wait(self) -> None:
        """Nothing is ever pending."""

    def abort(self, code: int = 1) -> None:
        """End this process at once."""
        os._exit(code)

    def __repr__(self) -> str:
        return "LocalEngine(world_size=1)"


def _add_float16(inbuf: Any, inoutbuf: Any, datatype: Any) -> None:
    a = np.frombuffer(inbuf, dtype=np.float16)
    b = np.frombuffer(inoutbuf, dtype=np.float16)
    np.add(a, b, out=b)


class MpiEngine:
    """MPI through mpi4py, on CPU (numpy) arrays.

    Args:
        comm: an ``mpi4py.MPI.Comm`` (default ``COMM_WORLD``).
    """

    def __init__(self, comm: Any = None):
        mpi = import_mpi()
        self.MPI = mpi
        self.comm = mpi.COMM_WORLD if comm is None else comm
        self.world_size = self.comm.Get_size()
        self.global_rank = self.comm.Get_rank()
        node = self.comm.Split_type(mpi.COMM_TYPE_SHARED, key=self.global_rank)
        self.local_rank = node.Get_rank()
        node.Free()
        self._half_type: Any = None
        self._half_op: Any = None

    def _buffer(self, buf: Any) -> Any:
        """mpi4py's buffer specification of ``buf`` (its type from the array; a
        2-byte type for float16, summed by :func:`_add_float16`)."""
        if not isinstance(buf, np.ndarray):
            raise TypeError(
                f"MpiEngine: expected a numpy array, got {type(buf).__name__} (GPU arrays use NCCL)"
            )
        if not buf.flags.c_contiguous:
            raise ValueError("MpiEngine: collectives need a C-contiguous array")
        if buf.dtype == np.float16:
            if self._half_type is None:
                self._half_type = self.MPI.BYTE.Create_contiguous(2).Commit()
                self._half_op = self.MPI.Op.Create(_add_float16, commute=True)
            return [buf, buf.size, self._half_type]
        return buf

    def allreduce(self, buf: Any) -> Any:
        """Sum ``buf`` across the ranks in place (``MPI_Allreduce`` with ``MPI_IN_PLACE``)."""
        spec = self._buffer(buf)
        op = self._half_op if buf.dtype == np.float16 else self.MPI.SUM
        self.comm.Allreduce(self.MPI.IN_PLACE, spec, op=op)
        return buf

    def broadcast(self, buf: Any) -> Any:
        """Overwrite ``buf`` in place with rank 0's (``MPI_Bcast``)."""
        self.comm.Bcast(self._buffer(buf.view(np.uint8)), root=0)
        return buf

    def allgather(self, buf: Any) -> Any:
        """Every rank's ``buf``, stacked along a new first axis."""
        buf = np.ascontiguousarray(buf)
        out = np.empty((self.world_size, *buf.shape), dtype=buf.dtype)
        if buf.dtype == np.float16:  # moved as bits: no arithmetic on them
            self.comm.Allgather(self._buffer(buf.view(np.uint16)), self._buffer(out.view(np.uint16)))
        else:
            self.comm.Allgather(self._buffer(buf), self._buffer(out))
        return out

    def sum_scalars(self, values: list) -> list:
        """The sums of a few numbers across ranks (float64)."""
        buf = np.asarray(values, dtype=np.float64)
        self.comm.Allreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)
        return buf.tolist()

    def wait(self) -> None:
        """MPI's blocking collectives have finished when they return."""

    def abort(self, code: int = 1) -> None:
        """``MPI_Abort``: the launcher ends every rank of the job."""
        self.comm.Abort(code)

    def __repr__(self) -> str:
        return f"MpiEngine(rank {self.global_rank} of {self.world_size}, local rank {self.local_rank})"
