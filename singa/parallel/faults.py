"""What a rank does when something goes wrong, so that no rank is left waiting.

- :func:`abort_on_exception`: an uncaught exception in any rank prints one line
  naming the rank (then the traceback) and aborts the whole job (``MPI_Abort``), so
  the launcher ends every rank with a non-zero exit at once instead of leaving the
  others blocked in their next collective.
- A rank killed by a signal (SIGKILL, the OOM killer) is noticed by ``mpiexec``,
  which then ends the job; this needs nothing from us.
- :func:`agree` makes a stop request of any rank (Ctrl-C, ``--max-steps``) a stop for
  every rank at the same step.
"""

from __future__ import annotations

import sys
import threading
import traceback
from typing import Any

__all__ = ["abort_on_exception", "failure_line", "agree"]

_installed: list = []


def failure_line(rank: int, world_size: int, exc: BaseException) -> str:
    """The one line that names the failed rank and the error."""
    msg = str(exc).splitlines()[0] if str(exc) else ""
    return f"singa: rank {rank} of {world_size} failed: {type(exc).__name__}{': ' + msg if msg else ''}"


def abort_on_exception(engine: Any) -> None:
    """Make an uncaught exception (in the main thread or any other) abort the job
    through ``engine`` after printing :func:`failure_line` and the traceback to stderr.
    KeyboardInterrupt aborts too (the other ranks could not finish a step without this
    one). Installing it again for the same engine does nothing."""
    if engine in _installed:
        return
    _installed.append(engine)
    previous = sys.excepthook

    def hook(exc_type: Any, exc: BaseException, tb: Any) -> None:
        try:
            sys.stderr.write(failure_line(engine.global_rank, engine.world_size, exc) + "\n")
            sys.stderr.write("".join(traceback.format_exception(exc_type, exc, tb)))
            sys.stderr.flush()
        finally:
            engine.abort(1)
        previous(exc_type, exc, tb)  # pragma: no cover - abort does not return

    def thread_hook(args: Any) -> None:
        if args.exc_type is SystemExit:
            return
        hook(args.exc_type, args.exc_value, args.exc_traceback)

    sys.excepthook = hook
    threading.excepthook = thread_hook


def agree(engine: Any, flag: bool) -> bool:
    """True on every rank when ``flag`` is True on any rank (a collective: every rank
    must call it at the same point)."""
    if engine.world_size == 1:
        return bool(flag)
    return engine.sum_scalars([1.0 if flag else 0.0])[0] > 0
