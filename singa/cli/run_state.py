"""Where a ``singa-train`` run is (:class:`RunState`, stored in its checkpoints) and
the Ctrl-C flag of its loop (:class:`SigintFlag`)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from singa.cli.errors import CliError
from singa.cli.output import Console
from singa.cli.preempt import StopSignals

__all__ = ["RunState", "RUN_STATE_VERSION", "SigintFlag"]

#: the version of the run state's layout
RUN_STATE_VERSION = 1


def _count(v: Any) -> int | float:
    """A stored sum: an int (correct answers) or a float (a regression's absolute errors)."""
    f = float(v)
    return int(f) if f.is_integer() else f


@dataclass
class RunState:
    """Where a run is: ``epoch`` (0-based) in progress, ``batch`` of its batches done,
    ``step`` training steps in all, the epoch's running sums, finished epochs."""

    epoch: int = 0
    batch: int = 0
    step: int = 0
    loss_sum: float = 0.0
    correct: int | float = 0  # correct answers (a regression: its summed absolute errors)
    seen: int = 0
    epoch_time: float = 0.0
    train_time: float = 0.0
    history: list = field(default_factory=list)

    def to_json(self) -> dict:
        """The position and sums as JSON values."""
        return {
            "epoch": self.epoch,
            "batch": self.batch,
            "step": self.step,
            "loss_sum": self.loss_sum,
            "correct": self.correct,
            "seen": self.seen,
            "epoch_time": self.epoch_time,
            "train_time": self.train_time,
            "history": self.history,
        }

    @classmethod
    def from_json(cls, d: dict) -> RunState:
        """The inverse of :meth:`to_json`."""
        try:
            return cls(
                epoch=int(d["epoch"]),
                batch=int(d["batch"]),
                step=int(d["step"]),
                loss_sum=float(d["loss_sum"]),
                correct=_count(d["correct"]),
                seen=int(d["seen"]),
                epoch_time=float(d["epoch_time"]),
                train_time=float(d["train_time"]),
                history=list(d["history"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise CliError(f"the checkpoint's run state is damaged ({type(e).__name__}: {e})") from e


class SigintFlag:
    """While active, the first Ctrl-C, SIGTERM or SIGUSR1 (the stop signal forwarded to
    ranks; see :mod:`singa.cli.preempt`) sets ``self.set`` (the loop stops after the
    current step and saves); a second one raises KeyboardInterrupt at once.
    ``exit_status`` is 130 after Ctrl-C, 143 after SIGTERM or SIGUSR1."""

    def __init__(self, console: Console):
        self.console = console
        self.set = False
        self.signals = StopSignals(self._handler)

    def _handler(self, signum: int, frame: Any) -> None:
        if self.set:
            raise KeyboardInterrupt
        self.set = True
        name = signal.Signals(signum).name if signum != signal.SIGINT else "interrupted"
        self.console.warn(f"{name}: stopping after this step (Ctrl-C again to quit at once)")

    @property
    def exit_status(self) -> int:
        """The exit status of the stop (130 or 143)."""
        return self.signals.exit_status

    @contextlib.contextmanager
    def active(self) -> Iterator[SigintFlag]:
        """Catch Ctrl-C, SIGTERM and SIGUSR1 for the block."""
        with self.signals:
            yield self
