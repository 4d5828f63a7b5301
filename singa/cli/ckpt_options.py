"""Checkpoint folders on the command line: ``--checkpoint-dir DIR`` (a
:class:`~singa.checkpoint.CheckpointManager`: numbered files, the ``--keep`` newest
kept, and with ``--keep-best N`` the N of the lowest validation loss), ``--save-every
N`` (steps), ``--async-save``, ``--resume auto`` / ``--resume DIR`` (the newest valid
checkpoint of the folder, or a fresh start when it has none, so that a scheduler can
resubmit the same command line) and ``--max-restarts K``
(:mod:`singa.cli.restart`).

The trainer calls :func:`resolve_resume` before it reads ``--resume`` and saves
through :class:`ManagedCheckpoints` when a folder is given."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import click

from singa.checkpoint import CheckpointError, CheckpointManager, newest_valid
from singa.cli.errors import CliError

__all__ = [
    "ckpt_options",
    "check_ckpt_options",
    "ResumeTarget",
    "resolve_resume",
    "ManagedCheckpoints",
    "save_due",
    "DEFAULT_KEEP",
]

#: checkpoints a folder keeps without --keep
DEFAULT_KEEP = 3


class ResumeTarget(click.ParamType):
    """``auto``, a checkpoint file or a checkpoint folder (that exists)."""

    name = "checkpoint"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The value itself, once checked."""
        value = os.fspath(value)
        if value == "auto" or os.path.exists(value):
            return value
        self.fail(f"{value!r} does not exist (give a checkpoint file, a --checkpoint-dir folder or 'auto')")


_OPTIONS = [
    click.option(
        "--checkpoint-dir",
        type=click.Path(file_okay=False),
        metavar="DIR",
        help="Save numbered checkpoints in this folder (at each epoch's end, every --save-every steps "
        f"and on Ctrl-C or SIGTERM), keeping the --keep newest (default {DEFAULT_KEEP}).",
    ),
    click.option(
        "--save-every",
        type=click.IntRange(min=1),
        metavar="N",
        help="Also save a checkpoint every N training steps.",
    ),
    click.option(
        "--keep-best",
        type=click.IntRange(min=1),
        metavar="N",
        help="With --checkpoint-dir: also keep the N checkpoints of the lowest validation loss "
        "(those saved at an epoch's end), besides the --keep newest.",
    ),
    click.option(
        "--async-save",
        is_flag=True,
        help="With --checkpoint-dir: write checkpoints in the background while training goes on.",
    ),
    click.option(
        "--max-restarts",
        type=click.IntRange(min=0),
        default=0,
        metavar="K",
        help="When the job fails (a rank dies), start it again from the newest valid checkpoint "
        "of --checkpoint-dir, at most K times.",
    ),
]


def ckpt_options(f: Any) -> Any:
    """Add the options above to a click command."""
    for option in reversed(_OPTIONS):
        f = option(f)
    return f


def check_ckpt_options(ctx: click.Context, cfg: Any) -> None:
    """Usage errors of these options' combinations."""
    if cfg.resume == "auto" and not cfg.checkpoint_dir:
        raise click.UsageError(
            "--resume auto needs --checkpoint-dir DIR (the folder to continue from)", ctx=ctx
        )
    if cfg.keep_best and not cfg.checkpoint_dir:
        raise click.UsageError("--keep-best needs --checkpoint-dir DIR", ctx=ctx)
    if cfg.async_save and not cfg.checkpoint_dir:
        raise click.UsageError("--async-save needs --checkpoint-dir DIR", ctx=ctx)
    if cfg.max_restarts and not cfg.checkpoint_dir:
        raise click.UsageError(
            "--max-restarts needs --checkpoint-dir DIR (a restart continues from its newest checkpoint)",
            ctx=ctx,
        )
    if cfg.checkpoint_dir and cfg.checkpoint:
        raise click.UsageError("give --checkpoint FILE or --checkpoint-dir DIR, not both", ctx=ctx)
    if cfg.checkpoint_dir and os.path.isfile(cfg.checkpoint_dir):
        raise click.UsageError(f"--checkpoint-dir {cfg.checkpoint_dir}: a file is in the way", ctx=ctx)


def resolve_resume(cfg: Any, warn: Callable[[str], None], info: Callable[[str], None]) -> None:
    """Turn ``--resume auto`` / ``--resume DIR`` into the newest valid checkpoint file of
    the folder (damaged newer files are skipped with a warning), or into no resume at
    all when the folder holds none; ``--resume DIR`` also saves there unless told
    otherwise. A checkpoint file is left as it is."""
    target = cfg.resume
    if target is None:
        return
    if target == "auto":
        folder = cfg.checkpoint_dir
    elif os.path.isdir(target):
        folder = target
        if cfg.checkpoint_dir is None and cfg.checkpoint is None:
            cfg.checkpoint_dir = target
    else:
        return
    try:
        found = newest_valid(folder)
    except CheckpointError as e:
        raise CliError(
            f"cannot resume from {folder}: no checkpoint in it reads back whole", details=str(e)
        ) from e
    if found is None:
        info(f"no checkpoint in {folder}: starting afresh")
        cfg.resume = None
        return
    step, path, skipped = found
    for line in skipped:
        warn(f"skipping a damaged checkpoint: {line}")
    cfg.resume = path


def save_due(cfg: Any, step: int) -> bool:
    """True when ``--save-every`` asks for a checkpoint after ``step`` steps."""
    return bool(cfg.save_every) and step > 0 and step % cfg.save_every == 0


def _metrics(history: list) -> dict:
    last = history[-1] if history else {}
    out = {}
    for key in ("val_loss", "val_acc", "val_mse", "val_mae", "train_loss"):
        v = last.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            out[key] = float(v)
    return out


class ManagedCheckpoints:
    """``--checkpoint-dir``'s manager (rank 0 only): saves the run state with every
    checkpoint and the last epoch's metrics."""

    def __init__(self, cfg: Any):
        best = cfg.keep_best or 0
        self.manager = CheckpointManager(
            cfg.checkpoint_dir,
            keep_last=cfg.keep or DEFAULT_KEEP,
            keep_best=best,
            monitor="val_loss" if best else None,
            async_save=bool(cfg.async_save),
        )
        self.last: str | None = None

    def save(self, step: int, model: Any, aux_states: dict, history: list, epoch_end: bool = True) -> str:
        """Save ``model`` as step ``step``'s checkpoint; returns its path (written in the
        background with ``--async-save``; an earlier background failure raises here). The
        last epoch's metrics go with an ``epoch_end`` checkpoint only: a mid-epoch one
        is not ranked by ``--keep-best`` on an earlier epoch's validation loss."""
        metrics = _metrics(history) if epoch_end else {}
        self.last = self.manager.save(step, model, metrics=metrics, aux_states=aux_states)
        return self.last

    def wait(self) -> None:
        """Wait for a background save (raising its error)."""
        self.manager.wait()
