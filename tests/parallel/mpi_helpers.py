"""Running commands as MPI ranks in the tests (skipped where MPI is missing)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from singa.parallel.launch import find_mpiexec, mpi_env, mpiexec_command

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: a 2-core CI machine under load: generous, and still far below a hang
TIMEOUT = 300


def mpi_available() -> bool:
    """mpi4py is installed and an mpiexec was found."""
    return importlib.util.find_spec("mpi4py") is not None and find_mpiexec() is not None


#: apply to every test that starts ranks
needs_mpi = [
    pytest.mark.mpi,
    pytest.mark.skipif(not mpi_available(), reason="needs mpi4py and mpiexec: pip install '.[dist]'"),
]


def env_for(nproc: int) -> dict:
    """The ranks' environment: this worktree first on PYTHONPATH, one BLAS thread."""
    env = mpi_env(nproc, threads=1)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_mpi(nproc: int, args: list[str], timeout: float = TIMEOUT, **kw) -> subprocess.CompletedProcess:
    """``mpiexec -n nproc python args...``; returns the finished process (text output)."""
    cmd = mpiexec_command(nproc, [sys.executable, *args])
    return subprocess.run(
        cmd, env=kw.pop("env", None) or env_for(nproc), capture_output=True, text=True, timeout=timeout, **kw
    )
