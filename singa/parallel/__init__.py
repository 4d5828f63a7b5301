"""Data-parallel training: the communicator, its engines, and launch helpers.

Most users only need :class:`singa.opt.DistOpt` and ``mpiexec``; this package holds
what it is built from:

- :class:`Communicator`: the ranks of the job and the engines for CPU arrays (MPI
  through mpi4py) and GPU arrays (NCCL through cupy);
- :class:`NcclIdHolder`: the NCCL id a multiprocessing launch shares among its
  children (SINGA's ``singa.NcclIdHolder``);
- :mod:`singa.parallel.collectives`: fused, half-precision and sparse all-reduces;
- :mod:`singa.parallel.faults`: abort the job when a rank fails, agree on stopping;
- :mod:`singa.parallel.launch`: find ``mpiexec`` and start local ranks.
"""

from singa.parallel.communicator import Communicator, host_engine
from singa.parallel.engines import DIST_HINT, LocalEngine, MpiEngine, launched_world_size
from singa.parallel.nccl import NcclEngine, NcclIdHolder

__all__ = [
    "Communicator",
    "host_engine",
    "LocalEngine",
    "MpiEngine",
    "NcclEngine",
    "NcclIdHolder",
    "DIST_HINT",
    "launched_world_size",
]
