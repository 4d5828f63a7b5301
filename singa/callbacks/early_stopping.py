"""Stop training when a monitored quantity has stopped improving (Keras's
``EarlyStopping``, with its counting)."""

from __future__ import annotations

from typing import Any

from singa.callbacks.base import Callback
from singa.callbacks.monitor import Monitor

__all__ = ["EarlyStopping", "copy_states"]


def copy_states(model: Any) -> dict:
    """Copies of the model's parameters and buffers, by dotted name."""
    return {n: t.data.copy() for n, t in model.get_states().items()}


class EarlyStopping(Callback):
    """Stop when ``monitor`` has not improved for ``patience`` epochs.

    Counting (Keras's): at each epoch end ``wait`` grows by one; an improvement (better
    than ``best`` by more than ``min_delta``) records ``best`` and ``best_epoch`` and
    resets ``wait`` to 0 (only when the value also beats ``baseline``, if given);
    otherwise once ``wait >= patience`` (and it is not the first epoch) the run stops
    and ``stopped_epoch`` is that epoch. With ``restore_best_weights`` the states of
    the best epoch are put back when training ends (the first epoch's states are kept
    from the start, so there is always a best to restore).

    Args:
        monitor: the log key (``val_loss``, ``val_accuracy``, ``loss``, ...).
        min_delta: the smallest change that counts as an improvement.
        patience: epochs without improvement before stopping.
        mode: ``"min"``, ``"max"`` or ``"auto"`` (max for accuracy-like names).
        restore_best_weights: restore the best epoch's states at the end.
        baseline: a value the monitor must beat for ``wait`` to reset.
        start_from_epoch: epochs (from 0) during which nothing is counted.
    """

    def __init__(
        self,
        monitor: str = "val_loss",
        min_delta: float = 0.0,
        patience: int = 0,
        verbose: int = 0,
        mode: str = "auto",
        baseline: float | None = None,
        restore_best_weights: bool = False,
        start_from_epoch: int = 0,
    ):
        super().__init__()
        self.watch = Monitor(monitor, mode, min_delta, "EarlyStopping")
        for name, v in (("patience", patience), ("start_from_epoch", start_from_epoch)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"EarlyStopping: {name} must be an int >= 0, got {v!r}")
        self.monitor = monitor
        self.patience = patience
        self.verbose = verbose
        self.baseline = None if baseline is None else float(baseline)
        self.restore_best_weights = bool(restore_best_weights)
        self.start_from_epoch = start_from_epoch
        self._reset()

    def _reset(self) -> None:
        self.wait = 0
        self.stopped_epoch = 0
        self.best: float | None = None
        self.best_weights: dict | None = None
        self.best_epoch = 0

    @property
    def min_delta(self) -> float:
        """The smallest change counted as an improvement (>= 0)."""
        return self.watch.min_delta

    def on_train_begin(self, logs: dict | None = None) -> None:
        """Start counting afresh."""
        self._reset()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """Count the epoch; stop the run when patience has run out."""
        current = self.watch.value(logs)
        if current is None or epoch < self.start_from_epoch:
            return
        if self.restore_best_weights and self.best_weights is None:
            self.best_weights = copy_states(self.model)
            self.best_epoch = epoch
        self.wait += 1
        if self.watch.improves(current, self.best):
            self.best = current
            self.best_epoch = epoch
            if self.restore_best_weights:
                self.best_weights = copy_states(self.model)
            if self.baseline is None or self.watch.improves(current, self.baseline):
                self.wait = 0
            return
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True

    def on_train_end(self, logs: dict | None = None) -> None:
        """Restore the best states when asked to."""
        if self.stopped_epoch > 0 and self.verbose:
            print(f"Epoch {self.stopped_epoch + 1}: early stopping")
        if self.restore_best_weights and self.best_weights is not None:
            if self.verbose:
                print(f"Restoring the states from the end of the best epoch: {self.best_epoch + 1}.")
            self.model.set_states(self.best_weights)

    def state_dict(self) -> dict:
        """The counters (the best weights are not kept)."""
        return {"wait": self.wait, "best": self.best, "best_epoch": self.best_epoch}

    def load_state_dict(self, state: dict) -> None:
        """Restore the counters of :meth:`state_dict`."""
        self.wait = int(state.get("wait", 0))
        self.best = state.get("best")
        self.best_epoch = int(state.get("best_epoch", 0))
