"""NCCL through cupy, for GPU arrays (SINGA's GPU communicator).

Every rank drives one GPU. The ranks agree on an NCCL unique id: under ``mpiexec``
rank 0 draws it and MPI broadcasts it (mpi4py); in a multiprocessing launch (SINGA's
``train_multiprocess.py``) the parent makes a :class:`NcclIdHolder` and hands it to
each child with its ``local_rank``. Collectives run on cupy's current stream of the
rank's GPU (``cupy.cuda.nccl.NcclCommunicator.allReduce``/``allGather`` on device
pointers), so they are ordered with the kernels that produced the gradients.

cupy is imported when an engine or id holder is made, never at import time.
"""

from __future__ import annotations

from typing import Any

from singa.parallel.engines import DIST_HINT, import_mpi

__all__ = ["NcclIdHolder", "NcclEngine"]

_GPU_HINT = "NCCL needs cupy with NCCL support and a CUDA GPU: pip install '.[gpu]'"


def _nccl() -> Any:
    try:
        import cupy
        from cupy.cuda import nccl
    except ImportError as e:
        raise RuntimeError(f"{_GPU_HINT} ({e})") from e
    if not getattr(nccl, "available", True):
        raise RuntimeError(f"{_GPU_HINT} (this cupy was built without NCCL)")
    return cupy, nccl


class NcclIdHolder:
    """A fresh NCCL unique id (SINGA's ``singa.NcclIdHolder``): make one in the parent
    process and pass it to every child's :class:`~singa.opt.DistOpt`. It pickles, so
    multiprocessing can hand it over."""

    def __init__(self) -> None:
        _, nccl = _nccl()
        self.id = nccl.get_unique_id()

    def __repr__(self) -> str:
        return "NcclIdHolder()"


def _dtype_code(nccl: Any, dtype: Any) -> int:
    codes = {
        "float16": nccl.NCCL_FLOAT16,
        "float32": nccl.NCCL_FLOAT32,
        "float64": nccl.NCCL_FLOAT64,
        "int32": nccl.NCCL_INT32,
    }
    name = str(dtype)
    if name not in codes:
        raise TypeError(f"NcclEngine: no NCCL type for {name} (supported: {sorted(codes)})")
    return codes[name]


class NcclEngine:
    """NCCL collectives on cupy arrays (see :mod:`singa.parallel.engines` for the interface).

    Args:
        nccl_id: a :class:`NcclIdHolder` (multiprocessing launch) or None (MPI launch:
            the id is broadcast from rank 0 and the ranks come from MPI).
        local_rank: the GPU of this process (multiprocessing launch).
        world_size: the number of processes (multiprocessing launch).
    """

    def __init__(self, nccl_id: Any = None, local_rank: int | None = None, world_size: int | None = None):
        cupy, nccl = _nccl()
        self.cupy, self.nccl = cupy, nccl
        self.mpi = None
        if nccl_id is None:
            try:
                mpi = import_mpi()
            except RuntimeError as e:
                raise RuntimeError(
                    f"an NCCL job without an NcclIdHolder is launched by MPI: {DIST_HINT}"
                ) from e
            comm = mpi.COMM_WORLD
            self.mpi = comm
            self.world_size, self.global_rank = comm.Get_size(), comm.Get_rank()
            node = comm.Split_type(mpi.COMM_TYPE_SHARED, key=self.global_rank)
            self.local_rank = node.Get_rank()
            node.Free()
            uid = nccl.get_unique_id() if self.global_rank == 0 else None
            uid = comm.bcast(uid, root=0)  # once, at start-up: off the hot path
        else:
            if local_rank is None or world_size is None:
                raise ValueError("DistOpt: with an nccl_id, give local_rank and world_size too")
            self.world_size, self.global_rank, self.local_rank = (
                int(world_size),
                int(local_rank),
                int(local_rank),
            )
            uid = nccl_id.id
        cupy.cuda.Device(self.local_rank).use()
        self.comm = nccl.NcclCommunicator(self.world_size, uid, self.global_rank)

    def _stream(self) -> int:
        return self.cupy.cuda.get_current_stream().ptr

    def allreduce(self, buf: Any) -> Any:
        """Sum ``buf`` (a contiguous cupy array) across the ranks, in place."""
        code = _dtype_code(self.nccl, buf.dtype)
        ptr = buf.data.ptr
        self.comm.allReduce(ptr, ptr, buf.size, code, self.nccl.NCCL_SUM, self._stream())
        return buf

    def broadcast(self, buf: Any) -> Any:
        """Overwrite ``buf`` (contiguous) in place with rank 0's."""
        raw = buf.view(self.cupy.uint8)
        self.comm.bcast(raw.data.ptr, raw.size, self.nccl.NCCL_UINT8, 0, self._stream())
        return buf

    def allgather(self, buf: Any) -> Any:
        """Every rank's ``buf`` stacked along a new first axis."""
        buf = self.cupy.ascontiguousarray(buf)
        out = self.cupy.empty((self.world_size, *buf.shape), dtype=buf.dtype)
        code = _dtype_code(self.nccl, buf.dtype)
        self.comm.allGather(buf.data.ptr, out.data.ptr, buf.size, code, self._stream())
        return out

    def sum_scalars(self, values: list) -> list:
        """The sums of a few numbers across ranks."""
        buf = self.cupy.asarray(values, dtype=self.cupy.float64)
        return self.allreduce(buf).get().tolist()

    def wait(self) -> None:
        """Block until the current stream (and so every queued collective) is done."""
        self.cupy.cuda.get_current_stream().synchronize()

    def abort(self, code: int = 1) -> None:
        """Abort the communicator, then the MPI job (or this process)."""
        self.comm.abort()
        if self.mpi is not None:
            self.mpi.Abort(code)
        import os

        os._exit(code)

    def __repr__(self) -> str:
        return f"NcclEngine(rank {self.global_rank} of {self.world_size}, gpu {self.local_rank})"
