"""``singa-train`` over several processes (data-parallel, MPI).

``singa-train --nproc N ...`` starts N local ranks of the same command through the
installed ``mpiexec`` (:func:`launch`); ``mpiexec -n N singa-train ...`` (one
machine or a ``-hostfile``) starts them directly. Every rank then builds a
:class:`DistRun`:

- the batches: each rank takes its ``--batch-size`` slice of every global batch of
  ``N * batch-size`` samples of the epoch's shuffled order (same seed), so N ranks
  follow the trajectory of one process with the global batch size;
- the optimizer is wrapped in :class:`singa.opt.DistOpt` (gradients averaged);
- only rank 0 prints, writes the log, the plot, the ONNX file and the checkpoints;
  the other ranks wait for its checkpoint to be written before going on;
- the epoch's training and validation sums are added over the ranks, so the epoch
  line reports the global batch's metrics;
- a stop (Ctrl-C forwarded as SIGUSR1, ``--max-steps``) is agreed by every rank at
  the same step; a rank that fails prints one line naming itself and aborts the job.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import click

from singa import data
from singa.cli.errors import CliError
from singa.cli.output import Console
from singa.opt import DistOpt
from singa.parallel import Communicator, launched_world_size
from singa.parallel.launch import mpi_env, mpiexec_command, run_ranks

__all__ = ["DistRun", "launch", "strip_nproc", "SilentConsole"]


class SilentConsole(Console):
    """The console of ranks other than 0: prints nothing."""

    def __init__(self) -> None:
        super().__init__(quiet=True)

    def warn(self, msg: str) -> None:
        """Rank 0 warns for the job."""


def strip_nproc(args: list[str]) -> list[str]:
    """``args`` without ``--nproc N`` / ``--nproc=N``."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            out.append(a)
    return out


def launch(nproc: int, args: list[str]) -> int:
    """Run ``singa-train args`` (without ``--nproc``) as ``nproc`` local MPI ranks;
    returns the job's exit status."""
    if launched_world_size() > 1:
        raise click.UsageError("--nproc starts the ranks itself: leave it out under mpiexec")
    try:
        cmd = mpiexec_command(nproc, [sys.executable, "-m", "singa.cli.main", *strip_nproc(args)])
    except RuntimeError as e:
        raise click.ClickException(f"--nproc {nproc}: {e}") from None
    return run_ranks(cmd, env=mpi_env(nproc))


class DistRun:
    """This process's part of a ``singa-train`` job (one rank of ``world_size``)."""

    def __init__(self) -> None:
        self.comm = Communicator() if launched_world_size() > 1 else None
        self.world_size = self.comm.world_size if self.comm else 1
        self.rank = self.comm.global_rank if self.comm else 0

    @property
    def distributed(self) -> bool:
        """More than one rank."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: prints and writes the files."""
        return self.rank == 0

    def describe(self, batch_size: int) -> str:
        """The header line of a distributed run."""
        return (
            f"  data-parallel: {self.world_size} ranks x batch {batch_size} = global batch "
            f"{self.world_size * batch_size} (MPI)"
        )

    # ----- the pieces of the run ------------------------------------------------------
    def console(self, quiet: bool, verbose: bool) -> Console:
        """Rank 0's console, or a silent one."""
        return Console(quiet, verbose) if self.is_main else SilentConsole()

    def only_main_writes(self, cfg: Any) -> None:
        """Ranks other than 0 write no files and show no progress."""
        if not self.is_main:
            cfg.checkpoint = cfg.log = cfg.export_onnx = cfg.plot = None
            cfg.no_plot = cfg.quiet = True  # quiet: no progress bar either

    def rank_first(self, fn: Any) -> Any:
        """``fn()`` on rank 0 first (e.g. a download), then on the others."""
        if not self.distributed:
            return fn()
        if self.is_main:
            result = fn()
            self.barrier()
            return result
        self.barrier()
        return fn()

    def loader(self, *args: Any, **kw: Any) -> data.DataLoader:
        """A DataLoader of this rank's shard."""
        return data.DataLoader(*args, num_replicas=self.world_size, rank=self.rank, **kw)

    def optimizer(self, optimizer: Any) -> Any:
        """``optimizer`` wrapped in a DistOpt on this job's communicator."""
        return DistOpt(optimizer, communicator=self.comm) if self.distributed else optimizer

    def barrier(self) -> None:
        """Wait for every rank."""
        if self.distributed:
            self.comm.sum_scalars([0.0])

    def agree(self, flag: bool) -> bool:
        """True on every rank when any rank's ``flag`` is True."""
        return self.comm.agree(flag) if self.distributed else bool(flag)

    def add_sums(self, state: Any) -> None:
        """Replace the epoch's running sums by their totals over the ranks."""
        if self.distributed:
            total = self.comm.sum_scalars([state.loss_sum, state.correct, state.seen])
            state.loss_sum, state.seen = total[0], int(total[2])
            state.correct = int(round(total[1])) if isinstance(state.correct, int) else total[1]

    def evaluate(
        self, evaluate: Any, model: Any, loader: data.DataLoader, dev: Any, stop: Any, **kw: Any
    ) -> tuple[float, float]:
        """Validation loss and accuracy over every rank's shard, by ``evaluate`` (the
        trainer's :func:`singa.cli.common.evaluate`, given ``kw``). In one process ``stop()``
        may end it early; ranks stop at the next step instead."""
        if not self.distributed:
            loss, acc, _ = evaluate(model, loader, dev, stop=stop, **kw)
            return loss, acc
        loss, acc, n = evaluate(model, loader, dev, **kw)
        sums = [loss * n if n else 0.0, acc * n if n else 0.0, float(n)]
        total = self.comm.sum_scalars(sums)
        if total[2] == 0:
            return float("nan"), float("nan")
        return total[0] / total[2], total[1] / total[2]

    # ----- resume -------------------------------------------------------------------------
    def run_json(self, batch_size: int) -> dict:
        """What a checkpoint records about the job's size."""
        return {"world_size": self.world_size, "global_batch": self.world_size * batch_size}

    def resume_position(self, run: dict, state: Any, steps: int, batch_size: int, out: Any) -> None:
        """Check a resumed run's position against this job; when the number of ranks
        changed (and so the global batch), move to the batch of the new size that holds
        the first sample not trained yet (up to one new batch of samples is trained
        again) and warn. Ranks other than 0 drop the stored running sums (the sums are
        added over the ranks)."""
        old_world = int(run.get("world_size", 1))
        old_global = int(run.get("global_batch", old_world * run.get("config", {}).get("batch_size", 0)))
        new_global = self.world_size * batch_size
        if old_world == self.world_size or old_global == new_global:
            if run.get("steps_per_epoch") != steps:
                raise CliError(
                    f"cannot resume: the checkpoint was written with {run.get('steps_per_epoch')} "
                    f"steps per epoch, this run has {steps} (different data or batch size)"
                )
        else:
            done = state.batch * old_global
            state.batch = min(done // new_global, steps)
            out.warn(
                f"the global batch changed from {old_global} to {new_global} "
                f"({old_world} -> {self.world_size} ranks of batch {batch_size}): "
                f"continuing epoch {state.epoch + 1} at batch {state.batch} of {steps} "
                f"({done - state.batch * new_global} samples trained again)"
            )
        if not self.is_main:
            state.loss_sum, state.correct, state.seen = 0.0, 0, 0

    # ----- failures -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def failures(self) -> Iterator[None]:
        """A failure on one rank prints one line naming the rank and aborts the job."""
        try:
            yield
        except click.ClickException as e:
            if not self.distributed:
                raise
            who = f"rank {self.rank} of {self.world_size}"
            click.echo(f"singa-train: {who} failed: {e.format_message()}", err=True)
            sys.stderr.flush()
            self.comm.abort(1)
