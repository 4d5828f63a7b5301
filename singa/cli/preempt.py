"""Preemption: ``singa-train`` treats SIGTERM (what a cluster scheduler or Kubernetes
sends before it ends a job) and SIGUSR1 (what SLURM can send ahead of a deadline, and
what ``--nproc`` forwards a Ctrl-C as) like Ctrl-C: the current step finishes, every
rank stops at the same step, rank 0 saves, and the command exits with status 143
(128 + SIGTERM) instead of Ctrl-C's 130.

:class:`StopSignals` installs one handler for all three signals and remembers which
came; :func:`exit_status` is the status to end with."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["PREEMPT_SIGNALS", "EXIT_PREEMPTED", "StopSignals", "exit_status"]

#: the signals that mean "save and stop" besides SIGINT
PREEMPT_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
#: the exit status after a preemption signal (128 + SIGTERM)
EXIT_PREEMPTED = 128 + int(signal.SIGTERM)
#: the exit status after Ctrl-C (128 + SIGINT)
EXIT_CTRL_C = 128 + int(signal.SIGINT)


def exit_status(signum: int | None) -> int:
    """143 after SIGTERM or SIGUSR1, 130 after SIGINT (or no known signal)."""
    return EXIT_PREEMPTED if signum in PREEMPT_SIGNALS else EXIT_CTRL_C


class StopSignals:
    """While entered (on the main thread), SIGINT, SIGTERM and SIGUSR1 call
    ``handler(signum, frame)``; ``signum`` is the first stop signal received. The
    previous handlers come back on exit."""

    def __init__(self, handler: Callable[[int, Any], None]):
        self.handler = handler
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
        self.handler(signum, frame)

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, *PREEMPT_SIGNALS):
                self._previous[s] = signal.signal(s, self._on_signal)
        return self

    def __exit__(self, *exc: Any) -> None:
        for s, prev in self._previous.items():
            signal.signal(s, prev)
        self._previous.clear()

    @property
    def exit_status(self) -> int:
        """The status to exit with after the stop (see :func:`exit_status`)."""
        return exit_status(self.signum)
