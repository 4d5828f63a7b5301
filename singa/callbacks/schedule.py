"""Learning-rate callbacks: :class:`LearningRateScheduler` (a rate per epoch),
:class:`ReduceLROnPlateau` (divide the rate when a quantity stops improving), both
Keras's, working with a number or a step schedule as the optimizer's ``lr``."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from singa.callbacks.base import Callback
from singa.callbacks.monitor import Monitor
from singa.opt.dist import unwrap_optimizer

__all__ = ["LearningRateScheduler", "ReduceLROnPlateau", "Scaled", "get_lr", "set_lr"]


class Scaled:
    """A step schedule times a factor: ``Scaled(schedule, 0.1)(step) == 0.1 * schedule(step)``."""

    def __init__(self, schedule: Callable[[int], float], factor: float):
        self.schedule = schedule
        self.factor = float(factor)

    def __call__(self, step: int) -> float:
        """The scaled rate at ``step``."""
        return self.factor * float(self.schedule(step))

    def __repr__(self) -> str:
        return f"Scaled({self.schedule!r}, {self.factor!r})"


def _optimizer(model: Any) -> Any:
    opt = getattr(model, "optimizer", None)
    if opt is None:
        raise ValueError("learning-rate callbacks need a model with an optimizer (model.set_optimizer)")
    return unwrap_optimizer(opt)


def get_lr(model: Any) -> float:
    """The learning rate of the model's optimizer at its current step."""
    return float(_optimizer(model).get_lr())


def set_lr(model: Any, lr: float) -> None:
    """Make the rate at the current step ``lr``: a number replaces a number; a step
    schedule is scaled (it keeps its shape from here on)."""
    opt = _optimizer(model)
    if callable(opt.lr):
        now = float(opt.get_lr())
        if now == 0:
            raise ValueError("cannot rescale a schedule whose current rate is 0")
        current: Any = opt.lr
        base, factor = (current.schedule, current.factor) if isinstance(current, Scaled) else (current, 1.0)
        opt.lr = Scaled(base, factor * float(lr) / now)
    else:
        opt.lr = float(lr)


class LearningRateScheduler(Callback):
    """At the start of each epoch set the rate to ``schedule(epoch, lr)`` (Keras's
    signature; a function of the epoch alone, or a :class:`singa.opt.Scheduler` read at
    the epoch number, also works)."""

    def __init__(self, schedule: Callable[..., float], verbose: int = 0):
        super().__init__()
        if not callable(schedule):
            raise ValueError(f"LearningRateScheduler: schedule must be callable, got {schedule!r}")
        self.schedule = schedule
        self.verbose = verbose

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        """Set the epoch's rate."""
        try:
            lr = self.schedule(epoch, get_lr(self.model))
        except TypeError:
            lr = self.schedule(epoch)
        lr = float(lr)
        if not lr >= 0:
            raise ValueError(f"LearningRateScheduler: the schedule gave {lr!r} for epoch {epoch}")
        set_lr(self.model, lr)
        if self.verbose:
            print(f"Epoch {epoch + 1}: LearningRateScheduler setting the learning rate to {lr:g}.")


class ReduceLROnPlateau(Callback):
    """Multiply the rate by ``factor`` when ``monitor`` has not improved for
    ``patience`` epochs (Keras's counting: an improvement resets ``wait``; after a
    reduction, ``cooldown`` epochs pass before counting resumes; the rate never goes
    below ``min_lr``).

    Args:
        monitor, mode, min_delta: the watched quantity (see :class:`EarlyStopping`).
        factor: the multiplier (< 1).
        patience: epochs without improvement before a reduction.
        cooldown: epochs after a reduction during which ``wait`` stays 0.
        min_lr: the lowest rate.
    """

    def __init__(
        self,
        monitor: str = "val_loss",
        factor: float = 0.1,
        patience: int = 10,
        verbose: int = 0,
        mode: str = "auto",
        min_delta: float = 1e-4,
        cooldown: int = 0,
        min_lr: float = 0.0,
    ):
        super().__init__()
        if not 0 < factor < 1:
            raise ValueError(f"ReduceLROnPlateau: factor must be in (0, 1), got {factor!r}")
        for name, v in (("patience", patience), ("cooldown", cooldown)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"ReduceLROnPlateau: {name} must be an int >= 0, got {v!r}")
        self.watch = Monitor(monitor, mode, min_delta, "ReduceLROnPlateau")
        self.monitor = monitor
        self.factor = float(factor)
        self.patience = patience
        self.verbose = verbose
        self.cooldown = cooldown
        self.min_lr = float(min_lr)
        self._reset()

    def _reset(self) -> None:
        self.best = self.watch.worst
        self.wait = 0
        self.cooldown_counter = 0

    def on_train_begin(self, logs: dict | None = None) -> None:
        """Start counting afresh."""
        self._reset()

    def in_cooldown(self) -> bool:
        """Whether a reduction happened less than ``cooldown`` epochs ago."""
        return self.cooldown_counter > 0

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """Count the epoch; reduce the rate when patience has run out."""
        if logs is not None:
            logs["lr"] = get_lr(self.model)
        current = self.watch.value(logs)
        if current is None:
            return
        if self.in_cooldown():
            self.cooldown_counter -= 1
            self.wait = 0
        if self.watch.improves(current, self.best):
            self.best = current
            self.wait = 0
        elif not self.in_cooldown():
            self.wait += 1
            if self.wait >= self.patience:
                self._reduce(epoch)

    def _reduce(self, epoch: int) -> None:
        old = get_lr(self.model)
        if old > self.min_lr:
            new = max(old * self.factor, self.min_lr)
            set_lr(self.model, new)
            if self.verbose:
                print(f"Epoch {epoch + 1}: ReduceLROnPlateau reducing the learning rate to {new:g}.")
            self.cooldown_counter = self.cooldown
            self.wait = 0
        elif self.verbose:
            warnings.warn(
                f"ReduceLROnPlateau: the rate is at min_lr {self.min_lr:g}", RuntimeWarning, stacklevel=2
            )
