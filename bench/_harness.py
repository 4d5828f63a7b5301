"""Shared pieces of the benchmark scripts (run as ``python bench/<script>.py``).

The measuring method (``../shared/perf-notes.md``): every library runs BLOCKS of steps,
the blocks of the different libraries and modes alternate over several repetitions, and
a short pause separates two blocks, so that one library's spinning thread pool does not
steal the cores from the next. Times are quoted as medians and minima over all timed
steps, with the CPU time per step and the machine's load before and after.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field

Step = Callable[[], object]

#: environment variables that fix the thread count of numpy's BLAS and of PyTorch
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def mallopt() -> bool:
    """Ask glibc to keep freed memory (no trimming, no mmap for big blocks); True if it
    took both settings."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return libc.mallopt(m_trim_threshold, 1 << 30) == 1 and libc.mallopt(m_mmap_threshold, 1 << 30) == 1


def malloc_note(used_mallopt: bool) -> str:
    """How glibc malloc is tuned in this process, for a benchmark's header."""
    if used_mallopt:
        return "ON (mallopt)"
    env = [v for v in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_") if v in os.environ]
    return f"environment {', '.join(env)}" if env else "OFF (glibc defaults)"


def load_torch(threads: int, skip: bool) -> str | None:
    """Import PyTorch with ``threads`` threads and a fixed seed; its version, or None
    when skipped or not installed."""
    if skip:
        return None
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    return torch.__version__


def uptime() -> str:
    """The ``uptime`` line (load averages), or the load averages alone without it."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "load average: " + ", ".join(f"{v:.2f}" for v in os.getloadavg())


def thread_env(threads: int) -> dict[str, str]:
    """A copy of the environment with every BLAS/OpenMP thread variable set to ``threads``
    (they must be set before numpy or torch is imported: use it for a subprocess)."""
    env = dict(os.environ)
    for var in THREAD_VARS:
        env[var] = str(threads)
    return env


@dataclass
class Timing:
    """Wall and CPU seconds of single timed steps, and the first (untimed-warm-up) step."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    first: float | None = None

    @property
    def median(self) -> float:
        """Median wall seconds per step."""
        return statistics.median(self.wall)

    @property
    def minimum(self) -> float:
        """Minimum wall seconds per step."""
        return min(self.wall)

    @property
    def cpu_median(self) -> float:
        """Median CPU seconds (all threads of the process) per step."""
        return statistics.median(self.cpu)


def time_block(step: Step, steps: int, into: Timing) -> None:
    """Time ``steps`` single calls of ``step``: wall and process CPU time of each."""
    for _ in range(steps):
        w0, c0 = time.perf_counter(), time.process_time()
        step()
        into.cpu.append(time.process_time() - c0)
        into.wall.append(time.perf_counter() - w0)


def first_step(step: Step) -> float:
    """Run ``step`` once (graph tracing, torch.compile's compilation); its wall seconds."""
    t0 = time.perf_counter()
    step()
    return time.perf_counter() - t0


def run_blocks(
    steps: dict,
    reps: int,
    block: Callable[[object], int] | int,
    warmup: int = 1,
    pause: float = 0.3,
    timings: dict | None = None,
) -> dict:
    """The blocks method: ``reps`` rounds; in each, for every key of ``steps`` in turn
    (in reverse order every other round, so that no side always runs after the same
    one), sleep ``pause`` seconds, run ``warmup`` untimed steps, then time a block of
    ``block`` (or ``block(key)``) single steps. Returns key -> :class:`Timing`
    (``timings`` may hold the first-step times already)."""
    out = timings if timings is not None else {}
    for key in steps:
        out.setdefault(key, Timing())
    items = list(steps.items())
    for rnd in range(reps):
        for key, step in items if rnd % 2 == 0 else items[::-1]:
            time.sleep(pause)
            for _ in range(warmup):
                step()
            time_block(step, block(key) if callable(block) else block, out[key])
    return out


#: ``sh -c`` runs the command as a non-final command, so the shell forks a new process for it
_SHELL_FORK = '"$0" "$@"; exit $?'


def traced_peak(make: Callable[[], Step], warmup: int = 2, steps: int = 2) -> tuple[float, float]:
    """(step peak, total peak) in MiB of a steady-state step of ``make()``, traced by
    tracemalloc (which numpy reports its allocations to): the most a step allocates above
    what is live before it, and in total. singa's operator buffer pool is emptied first,
    so that every configuration builds its own."""
    from singa.kernels.buffers import clear_scratch

    clear_scratch()
    gc.collect()
    tracemalloc.start()
    try:
        step = make()
        for _ in range(warmup):
            step()
        gc.collect()
        step_peaks, total_peaks = [], []
        for _ in range(steps):
            start = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            step()
            peak = tracemalloc.get_traced_memory()[1]
            step_peaks.append(peak - start)
            total_peaks.append(peak)
    finally:
        tracemalloc.stop()
    return min(step_peaks) / 2**20, min(total_peaks) / 2**20


def run_child(argv: list[str], env: dict[str, str] | None = None, timeout: float | None = None) -> dict:
    """Run ``python argv...`` and parse the JSON object its last stdout line holds;
    raises RuntimeError with its stderr tail when it fails.

    The child is started through ``/bin/sh``, which forks it: Linux carries a process's
    peak RSS across fork and exec, so a child forked straight from this (maybe large)
    process would report this process's peak as its own ``ru_maxrss``."""
    cmd = ["/bin/sh", "-c", _SHELL_FORK, sys.executable, *argv]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        raise RuntimeError(f"{' '.join(argv)} failed (exit {proc.returncode}):\n{tail}")
    return json.loads(lines[-1])


def ms(seconds: float | None) -> str:
    """Seconds as milliseconds with two decimals, or '-'."""
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def time_and_profile(label: str, step: Step, steps: int, rows: int, torch_side: bool) -> None:
    """Three warm-up calls of ``step``, then ``steps`` timed ones (median and minimum
    printed with the load average), then a profile of ``steps`` more: cProfile's
    ``rows`` costliest functions for ours, torch.profiler's table when ``torch_side``
    (the profilers slow the step: compare the parts, not the totals)."""
    for _ in range(3):
        step()
    timing = Timing()
    time_block(step, steps, timing)
    ts = sorted(timing.wall)
    print(
        f"{label}: median {ts[len(ts) // 2] * 1e3:.1f} ms, min {ts[0] * 1e3:.1f} ms, load {os.getloadavg()}"
    )
    if torch_side:
        from torch.profiler import profile

        with profile() as prof:
            time_block(step, steps, Timing())
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))
        return
    import cProfile
    import pstats

    pr = cProfile.Profile()
    pr.enable()
    time_block(step, steps, Timing())
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(rows)
