"""Errors of the command line and how they are reported.

Expected failures (missing data, a checkpoint that does not match the model, an
unwritable output path, no GPU) end the command with one line on stderr and exit
status 1; ``--debug`` shows the traceback instead. Usage errors (bad options, a bad
config file) are click's and exit with status 2. Ctrl-C exits with status 130, SIGTERM or
SIGUSR1 (a preemption) with 143.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import click

__all__ = ["CliError", "ConfigError", "Interrupted", "EXIT_INTERRUPTED", "one_line", "reported"]

#: the exit status after Ctrl-C (128 + SIGINT), as shells use
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A failure to report as one line (exit status 1). ``details`` is shown with -v."""

    def __init__(self, message: str, details: str | None = None):
        super().__init__(message)
        self.details = details


class ConfigError(ValueError):
    """A bad setting (reported as a usage error, exit status 2)."""


class Interrupted(Exception):
    """Training stopped on Ctrl-C, SIGTERM or SIGUSR1 (after saving what could be
    saved); ``exit_status`` is 130 after Ctrl-C, 143 after the others."""

    def __init__(self, exit_status: int = EXIT_INTERRUPTED):
        super().__init__(exit_status)
        self.exit_status = exit_status


def one_line(exc: BaseException) -> str:
    """The first line of an exception's message (with the exception's type when it is
    not one of the expected kinds)."""
    if isinstance(exc, OSError) and exc.strerror and exc.filename is not None:
        return f"{exc.strerror}: {os.fsdecode(exc.filename)}"
    text = str(exc).strip()
    first = text.splitlines()[0].strip().rstrip(":") if text else ""
    if not isinstance(exc, CliError | ValueError | OSError | RuntimeError | LookupError) or not first:
        first = f"{type(exc).__name__}: {first}".rstrip(": ")
    return first


def _details(exc: BaseException) -> str | None:
    """The full message when it says more than :func:`one_line`."""
    text = getattr(exc, "details", None) or str(exc).strip()
    return text if text and len(text.splitlines()) > 1 else None


@contextlib.contextmanager
def reported(debug: bool, verbose: bool = False) -> Iterator[None]:
    """Turn exceptions into click errors: one line and exit status 1 (with ``verbose``
    the full message first), or the traceback with ``debug``. Click's own exceptions
    and :class:`Interrupted` pass through."""
    try:
        yield
    except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort, Interrupted):
        raise
    except Exception as e:
        if debug:
            raise
        details = _details(e)
        if verbose and details:
            click.echo(details, err=True)
        hint = " (-v for details)" if details and not verbose else ""
        raise click.ClickException(one_line(e) + hint) from None
