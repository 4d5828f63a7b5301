"""Stop on a diverged loss (Keras's ``TerminateOnNaN``)."""

from __future__ import annotations

import math

from singa.callbacks.base import Callback

__all__ = ["TerminateOnNaN", "Diverged"]


class Diverged(RuntimeError):
    """The loss of a training batch was not finite (or above the limit)."""

    def __init__(self, step: int, loss: float):
        super().__init__(f"training diverged at step {step}: the loss is {loss:g}")
        self.step = step
        self.loss = loss


class TerminateOnNaN(Callback):
    """Stop training when a batch's loss is nan or infinite (or above ``limit``).

    Args:
        limit: also stop when the loss exceeds this (None: only non-finite losses).
        raise_error: raise :class:`Diverged` instead of setting
            ``model.stop_training`` (the run then ends without the epoch-end hooks, so
            no checkpoint is written over a good one).

    Attributes:
        stopped_step: the training step (1-based, in this run) that stopped it, or None.
    """

    def __init__(self, limit: float | None = None, raise_error: bool = False):
        super().__init__()
        self.limit = None if limit is None else float(limit)
        self.raise_error = bool(raise_error)
        self.stopped_step: int | None = None
        self.step = 0

    def on_train_begin(self, logs: dict | None = None) -> None:
        """Count steps from where the run starts."""
        self.step = int(self.params.get("initial_step", 0))
        self.stopped_step = None

    def on_train_batch_end(self, step: int, logs: dict | None = None) -> None:
        """Check the batch's loss."""
        self.step += 1
        loss = (logs or {}).get("loss")
        if loss is None:
            return
        loss = float(loss)
        if math.isfinite(loss) and (self.limit is None or loss <= self.limit):
            return
        self.stopped_step = self.step
        if self.raise_error:
            raise Diverged(self.step, loss)
        print(f"Batch {step}: invalid loss {loss:g}, terminating training")
        self.model.stop_training = True
