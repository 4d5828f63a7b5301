"""End training at a time budget with the learning-rate schedule fitted to it
(``fit(..., time_budget=seconds)``)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from singa.callbacks.base import Callback
from singa.opt.dist import DistOpt, unwrap_optimizer

__all__ = ["TimeBudget", "parse_duration"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str | float | int) -> float:
    """Seconds in ``"90"``, ``"90s"``, ``"10m"``, ``"1.5h"``, ``"1h30m"`` or a number."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        seconds = float(text)
    else:
        s = str(text).strip().lower()
        seconds, num = 0.0, ""
        for ch in s:
            if ch.isdigit() or ch == ".":
                num += ch
            elif ch in _UNITS and num:
                seconds += float(num) * _UNITS[ch]
                num = ""
            else:
                raise ValueError(f"not a duration: {text!r} (use e.g. 90s, 10m, 1h30m)")
        if num:
            seconds += float(num)
        if not s:
            raise ValueError("not a duration: empty")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"a duration must be a positive number of seconds, got {text!r}")
    return seconds


class TimeBudget(Callback):
    """Stop training once ``seconds`` have passed since it began, and fit the
    learning-rate schedule to the time: after ``estimate_after`` training batches,
    and again every ``every`` batches, the number of optimizer steps that fit in the
    budget is estimated from the time per step measured since the first batch ended
    (the first one compiles and traces), and the optimizer's schedule
    is stretched (or shrunk) so that its end (:meth:`singa.opt.Scheduler.horizon`;
    warm-up included) falls on that step, capped at the steps the run's epochs hold.
    A schedule without an end (or a constant rate) is scaled relative to the run's
    planned steps. Data-parallel ranks (a DistOpt) stop together when any rank's time
    is up and stretch their schedules by the mean of their estimates.

    Args:
        seconds: the budget.
        estimate_after: batches measured before the first estimate.
        every: batches between corrections.
        clock: the time source (seconds; tests pass a counter).

    Attributes:
        horizon: the schedule's last estimated end (optimizer steps), None before.
        stopped: whether the budget stopped the run.
    """

    def __init__(
        self,
        seconds: float | str,
        estimate_after: int = 5,
        every: int = 20,
        clock: Callable[[], float] = time.perf_counter,
    ):
        super().__init__()
        self.seconds = parse_duration(seconds)
        for name, v in (("estimate_after", estimate_after), ("every", every)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"TimeBudget: {name} must be an int >= 1, got {v!r}")
        self.estimate_after = estimate_after
        self.every = every
        self.clock = clock
        self.horizon: int | None = None
        self.stopped = False
        self.batches = 0

    def _schedule(self) -> Any:
        opt = unwrap_optimizer(self.model.optimizer) if getattr(self.model, "optimizer", None) else None
        lr = getattr(opt, "lr", None)
        return lr if hasattr(lr, "stretch") else None

    def on_train_begin(self, logs: dict | None = None) -> None:
        """Start the clock; note the plan."""
        self.t0 = self.clock()
        self.batches = 0
        self.stopped = False
        opt = unwrap_optimizer(self.model.optimizer)
        self.first = (0.0, opt.steps)
        accumulate = int(self.params.get("accumulate", 1))
        planned = self.params.get("planned_batches")
        self.planned_steps = None if planned is None else opt.steps + math.ceil(planned / accumulate)
        sched = self._schedule()
        self.base_horizon = None
        if sched is not None:
            sched.stretch(1.0)  # remember the lengths it was built with
            self.base_horizon = sched.horizon() or self.planned_steps

    def on_train_batch_end(self, step: int, logs: dict | None = None) -> None:
        """Re-estimate when due; stop at the budget."""
        self.batches += 1
        elapsed = self.clock() - self.t0
        if self._ranks_agree(elapsed >= self.seconds):
            self.stopped = True
            self.model.stop_training = True
            return
        if self.batches == 1:  # the rate is measured from here: the first step compiles and traces
            self.first = (elapsed, unwrap_optimizer(self.model.optimizer).steps)
        due = self.batches == self.estimate_after or (
            self.batches > self.estimate_after and (self.batches - self.estimate_after) % self.every == 0
        )
        if due:
            self._estimate(elapsed)

    def _dist(self) -> DistOpt | None:
        opt = getattr(self.model, "optimizer", None)
        return opt if isinstance(opt, DistOpt) and opt.world_size > 1 else None

    def _ranks_agree(self, over: bool) -> bool:
        """Data-parallel ranks stop at the same step: when any rank's time is up."""
        dist = self._dist()
        return dist.all_reduce_any(over) if dist is not None else over

    def _ranks_mean(self, total: int) -> int:
        """Data-parallel ranks fit one schedule: the mean of their estimates."""
        dist = self._dist()
        if dist is None:
            return total
        return int(dist.communicator.sum_scalars([float(total)])[0] / dist.world_size)

    def _estimate(self, elapsed: float) -> None:
        opt = unwrap_optimizer(self.model.optimizer)
        t1, steps1 = self.first
        done = opt.steps - steps1
        if done <= 0:  # the same on every rank (they step together)
            return
        per_step = max(elapsed - t1, 1e-9) / done
        total = self._ranks_mean(opt.steps + int((self.seconds - elapsed) / per_step))
        if self.planned_steps is not None:
            total = min(total, self.planned_steps)
        self.horizon = max(total, opt.steps + 1)
        sched = self._schedule()
        if sched is not None and self.base_horizon:
            sched.stretch(self.horizon / self.base_horizon)
