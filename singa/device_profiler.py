"""Per-operator time profiling for a device (SINGA's ``SetVerbosity`` / ``PrintTimeProfiling``).

While a device has a :class:`OperatorProfiler` as its ``profiler``, the autograd
engine runs every operator's forward and backward through :meth:`OperatorProfiler.run`,
which times the kernel (synchronising a GPU before and after, so the time is the
kernel's, not the launch's). An iteration is a run of forward calls followed by
backward calls; the first ``skip_iterations`` iterations (warm-up) are not counted,
as in SINGA. Models compiled with ``use_graph=True`` run eagerly while profiling so
that each operator can be timed.

Example::

    dev.SetVerbosity(2)          # 1: forward/backward totals, 2: also each operator
    dev.SetSkipIteration(1)
    ... train ...
    dev.PrintTimeProfiling()
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

PHASES = ("forward", "backward")


class OperatorProfiler:
    """Accumulates kernel times per (phase, operator type) on one device.

    Args:
        dev: the profiled device (synchronised around each kernel on a GPU).
        verbosity: 1 reports forward/backward totals per iteration; 2 adds each operator type.
        skip_iterations: leading iterations left out of the statistics.
    """

    def __init__(self, dev: Any, verbosity: int = 1, skip_iterations: int = 5):
        if verbosity < 1:
            raise ValueError(f"verbosity must be 1 or 2 for profiling, got {verbosity}")
        if skip_iterations < 0:
            raise ValueError(f"skip_iterations must not be negative, got {skip_iterations}")
        self.dev = dev
        self.verbosity = verbosity
        self.skip_iterations = skip_iterations
        self.iteration = 0
        self._last_phase = "forward"
        self._seen_any = False
        self.seconds: dict[tuple[str, str], float] = {}
        self.calls: dict[tuple[str, str], int] = {}

    def run(self, op: Any, fn: Callable, arrays: Sequence[Any], phase: str) -> Any:
        """Run ``fn(*arrays)`` (op's forward or backward), timing it. Returns its result."""
        if phase == "forward" and self._last_phase == "backward":
            self.iteration += 1
        self._last_phase = phase
        self.dev.synchronize()
        start = time.perf_counter()
        out = fn(*arrays)
        self.dev.synchronize()
        elapsed = time.perf_counter() - start
        if self.iteration >= self.skip_iterations:
            key = (phase, type(op).__name__)
            self.seconds[key] = self.seconds.get(key, 0.0) + elapsed
            self.calls[key] = self.calls.get(key, 0) + 1
            self._seen_any = True
        return out

    @property
    def counted_iterations(self) -> int:
        """Iterations whose times are in the statistics (the current one included)."""
        return max(self.iteration - self.skip_iterations + 1, 0) if self._seen_any else 0

    def phase_seconds(self, phase: str) -> float:
        """Total seconds spent in ``phase`` ('forward' or 'backward') over counted iterations."""
        return sum(s for (p, _), s in self.seconds.items() if p == phase)

    def report(self) -> str:
        """A text table: per-iteration forward/backward times, and per operator at verbosity 2."""
        n = self.counted_iterations
        if n == 0:
            return (
                f"Time profiling: no iteration counted yet ({self.iteration} seen, "
                f"the first {self.skip_iterations} are skipped)"
            )
        lines = [f"Time profiling over {n} iteration(s) (after skipping {self.skip_iterations}):"]
        for phase in PHASES:
            lines.append(f"  {phase:8s} {1e3 * self.phase_seconds(phase) / n:10.4f} ms per iteration")
        if self.verbosity >= 2:
            lines.append(f"  {'phase':8s} {'operator':24s} {'calls':>8s} {'total ms':>10s} {'mean ms':>10s}")
            for (phase, name), sec in sorted(self.seconds.items(), key=lambda kv: -kv[1]):
                calls = self.calls[(phase, name)]
                lines.append(
                    f"  {phase:8s} {name:24s} {calls:8d} {1e3 * sec:10.4f} {1e3 * sec / calls:10.4f}"
                )
        return "\n".join(lines)
