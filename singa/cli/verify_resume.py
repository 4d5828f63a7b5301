"""``singa-train verify-resume [TRAIN ARGS...] --steps N --at K``: prove that a resume
is exact for your model and settings.

It runs the training given by TRAIN ARGS (any ``singa-train`` model and options)
twice, each in fresh processes: straight for N steps, and stopped after K steps then
resumed (``--resume auto``) up to N. Then it compares the two final checkpoints:
every model state, optimizer slot and scalar, and the random generator's state.
Bitwise equal: "exact" and exit status 0; otherwise the differing entries and exit
status 1 (2 when a training run itself fails)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

import click
import numpy as np

from singa import checkpoint
from singa.checkpoint import CheckpointError, newest_valid

__all__ = ["verify_resume", "compare_checkpoints", "train_twice"]

_OWN = (
    "--max-steps",
    "--checkpoint",
    "--checkpoint-dir",
    "--resume",
    "--save-every",
    "--nproc",
    "--max-restarts",
)


def _check_args(args: Sequence[str]) -> None:
    for a in args:
        if a.split("=", 1)[0] in _OWN:
            raise click.UsageError(f"verify-resume sets {a.split('=', 1)[0]} itself: leave it out")


def _train(args: Sequence[str], folder: str, steps: int, resume: bool) -> None:
    cmd = [
        sys.executable,
        "-m",
        "singa.cli.main",
        *args,
        "--max-steps",
        str(steps),
        "--checkpoint-dir",
        folder,
    ]
    cmd += ["--keep", "1", "-q", "--no-plot"] + (["--resume", "auto"] if resume else [])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise click.ClickException(
            f"the training run failed (exit status {proc.returncode}): {' '.join(cmd[3:])}\n"
            + proc.stderr.strip()[-3000:]
        )


def train_twice(args: Sequence[str], steps: int, at: int, work: str) -> tuple[str, str]:
    """Train straight to ``steps``, and to ``at`` then resumed to ``steps``; returns the
    two final checkpoint files."""
    straight, resumed = os.path.join(work, "straight"), os.path.join(work, "resumed")
    _train(args, straight, steps, resume=False)
    _train(args, resumed, at, resume=False)
    _train(args, resumed, steps, resume=True)
    out = []
    for folder in (straight, resumed):
        found = newest_valid(folder)
        if found is None:
            raise click.ClickException(f"the run in {folder} saved no checkpoint")
        out.append(found[1])
    return out[0], out[1]


def _describe(a: np.ndarray, b: np.ndarray) -> str:
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"{a.shape} {a.dtype} vs {b.shape} {b.dtype}"
    if a.dtype.kind in "fc":
        diff = np.abs(a.astype(np.complex128) - b.astype(np.complex128))
        biggest = float(np.nanmax(diff)) if diff.size else 0.0
        return f"max |difference| {biggest:.3g}, {int((a != b).sum())} values"
    return f"{int((a != b).sum())} values differ"


def compare_checkpoints(first: str, second: str) -> tuple[int, list[str]]:
    """Compare two checkpoints entry by entry (bitwise; NaN equals NaN); returns the
    number of entries compared and one line per difference."""
    a, b = checkpoint.read_arrays(first), checkpoint.read_arrays(second)
    diffs = [f"{k}: only in the straight run" for k in sorted(set(a) - set(b))]
    diffs += [f"{k}: only in the resumed run" for k in sorted(set(b) - set(a))]
    for k in sorted(set(a) & set(b)):
        x, y = a[k], b[k]
        same = x.shape == y.shape and x.dtype == y.dtype and x.tobytes() == y.tobytes()
        if not same:
            diffs.append(f"{k}: {_describe(x, y)}")
    ia, ib = checkpoint.read(first), checkpoint.read(second)
    for what, u, v in (("optimizer", ia.optimizer, ib.optimizer), ("random state", ia.rng, ib.rng)):
        if u != v:
            diffs.append(f"{what}: differs")
    return len(set(a) | set(b)) + 2, diffs


@click.command(
    "verify-resume",
    context_settings={"help_option_names": ["-h", "--help"], "ignore_unknown_options": True},
)
@click.option("--steps", type=click.IntRange(min=2), default=20, show_default=True, help="Steps in all.")
@click.option(
    "--at", "at", type=click.IntRange(min=1), help="Stop and resume after this step [default: steps/2]."
)
@click.option(
    "--work", type=click.Path(file_okay=False), help="Keep the runs' folders here [default: a temporary one]."
)
@click.argument("train_args", nargs=-1, type=click.UNPROCESSED)
def verify_resume(steps: int, at: int | None, work: str | None, train_args: tuple[str, ...]) -> None:
    """Check that stopping and resuming training changes nothing: TRAIN_ARGS (a model and
    singa-train options) are trained straight for --steps steps, and stopped at --at then
    resumed; exit status 0 when the final states are bitwise equal, 1 when they differ."""
    at = at if at is not None else steps // 2
    if not 0 < at < steps:
        raise click.UsageError(f"--at must be between 1 and --steps - 1 ({steps - 1}), got {at}")
    _check_args(train_args)
    with tempfile.TemporaryDirectory(prefix="singa-verify-resume-") as tmp:
        folder = work or tmp
        os.makedirs(folder, exist_ok=True)
        click.echo(f"training {steps} steps straight, and {at} + {steps - at} steps resumed ...")
        first, second = train_twice(train_args, steps, at, folder)
        try:
            n, diffs = compare_checkpoints(first, second)
        except CheckpointError as e:
            raise click.ClickException(str(e)) from e
    if diffs:
        click.echo(f"NOT exact: {len(diffs)} of {n} entries differ after resuming at step {at}:")
        for line in diffs:
            click.echo("  " + line)
        raise SystemExit(1)
    click.echo(
        f"exact: all {n} entries (states, optimizer, random state) are bitwise equal after {steps} steps"
    )


def main(argv: list[str] | None = None) -> Any:
    """Run the command on its own (``python -m singa.cli.verify_resume``)."""
    return verify_resume.main(args=argv, prog_name="singa-train verify-resume")


if __name__ == "__main__":  # pragma: no cover
    main()
