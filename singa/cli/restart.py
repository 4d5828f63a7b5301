"""``singa-train --max-restarts K``: when the job fails (a rank dies, the process is
killed), it is started again at the same world size from the newest valid checkpoint
of ``--checkpoint-dir`` (``--resume auto``), at most K times; each restart is printed
and written to the ``--log`` file. torchrun's semantics: no membership changes.

Exit statuses that are not failures end the loop: 0 (done), 2 (a usage error), 130
(Ctrl-C) and 143 (SIGTERM or SIGUSR1: the job was preempted and saved)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence

import click

from singa.cli.output import JsonLog

__all__ = ["run_with_restarts", "run_single", "resume_args", "FINAL_STATUSES"]

#: exit statuses after which the job is not started again
FINAL_STATUSES = (0, 2, 130, 143)


def _without(args: Sequence[str], names: tuple[str, ...]) -> list[str]:
    """``args`` without the options ``names`` and their values."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a in names:
            skip = True
        elif not a.startswith(tuple(n + "=" for n in names)):
            out.append(a)
    return out


def resume_args(args: Sequence[str]) -> list[str]:
    """``args`` with any ``--resume X`` replaced by ``--resume auto`` (added if absent)
    and without ``--max-restarts K``."""
    return [*_without(args, ("--resume", "--max-restarts")), "--resume", "auto"]


def run_single(args: Sequence[str]) -> int:
    """Run one process of ``singa-train args`` and return its exit status."""
    return subprocess.call([sys.executable, "-m", "singa.cli.main", *args])


def _log(path: str | None, **record: object) -> None:
    """Append a ``restart`` record to the ``--log`` file."""
    if not path:
        return
    try:
        log = JsonLog(path, append=True)
        try:
            log.write("restart", **record)
        finally:
            log.close()
    except OSError as e:
        click.echo(f"warning: could not write the restart record to {path}: {e}", err=True)


def run_with_restarts(
    args: Sequence[str],
    max_restarts: int,
    launch: Callable[[Sequence[str]], int] | None = None,
    log_path: str | None = None,
) -> int:
    """Run the job (``launch(args)``: its ranks, or one process) and start it again with
    ``--resume auto`` after each failure, at most ``max_restarts`` times; returns the
    last exit status."""
    launch = launch or run_single
    rc = launch(_without(args, ("--max-restarts",)))
    restarts = 0
    while rc not in FINAL_STATUSES and restarts < max_restarts:
        restarts += 1
        click.echo(
            f"restart {restarts}/{max_restarts}: the job failed (exit status {rc}); "
            "continuing from its newest checkpoint",
            err=True,
        )
        _log(log_path, restart=restarts, max_restarts=max_restarts, exit_status=rc)
        rc = launch(resume_args(args))
    if rc not in FINAL_STATUSES and max_restarts:
        click.echo(f"the job failed {restarts + 1} times (exit status {rc}); giving up", err=True)
    return rc
