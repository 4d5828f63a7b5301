"""SINGA's build flags, answered truthfully for this pure-Python package.

Apache SINGA compiles a C++ extension named ``singa_wrap`` and programs test its
flags (``if singa_wrap.USE_CUDA: ...``) to decide what to run. This module answers
the same questions for this package; it contains no kernels and nothing that
imitates the C++ extension's classes or functions.

- ``USE_CUDA``: cupy is importable and sees at least one CUDA GPU.
- ``USE_DIST``: mpi4py is importable (data-parallel training over MPI).
- ``USE_DNNL``: False; CPU kernels are numpy's, not oneDNN's.
- ``USE_OPENCL``: False; there is no OpenCL backend.
- ``USE_PYTHON3``: True.

Example::

    from singa import singa_wrap
    if singa_wrap.USE_CUDA:
        dev = device.create_cuda_gpu()

``NcclIdHolder`` (see :mod:`singa.parallel.nccl`) is here too, for distributed scripts that
import it as ``from singa import singa_wrap as singa``.
"""

from __future__ import annotations

import importlib.util

from singa import __version__
from singa import device as _device
from singa.parallel.nccl import NcclIdHolder

__all__ = ["NcclIdHolder", "USE_CUDA", "USE_DIST", "USE_DNNL", "USE_OPENCL", "USE_PYTHON3", "SINGA_VERSION"]


def _has_module(name: str) -> bool:
    """True when ``name`` can be imported (checked without importing it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


USE_CUDA: bool = _device.get_num_gpus() > 0
USE_DIST: bool = _has_module("mpi4py")
USE_DNNL: bool = False
USE_OPENCL: bool = False
USE_PYTHON3: bool = True
SINGA_VERSION: str = __version__
