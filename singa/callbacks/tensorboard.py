"""Scalars for TensorBoard (Keras's ``TensorBoard`` callback), written with
tensorboardX's event-file writer."""

from __future__ import annotations

import math
import os
from typing import Any

from singa.callbacks.base import Callback

__all__ = ["TensorBoard"]


class TensorBoard(Callback):
    """Write event files that TensorBoard reads (``tensorboard --logdir DIR``).

    Each epoch end writes the scalars ``train/<key>`` for the training logs,
    ``val/<key>`` for the validation ones (``val_`` keys), and ``lr`` and
    ``samples_per_s`` as they are, at the epoch number (0-based);
    ``update_freq="batch"`` (or an int N: every N batches) also writes
    ``batch/loss`` at the training step.

    Args:
        log_dir: the folder of the event files (created).
        update_freq: ``"epoch"``, ``"batch"`` or an int.
    """

    def __init__(self, log_dir: str | os.PathLike = "logs", update_freq: str | int = "epoch"):
        super().__init__()
        if update_freq not in ("epoch", "batch") and not (
            isinstance(update_freq, int) and not isinstance(update_freq, bool) and update_freq >= 1
        ):
            raise ValueError(
                f"TensorBoard: update_freq must be 'epoch', 'batch' or an int >= 1, got {update_freq!r}"
            )
        try:
            import tensorboardX  # noqa: F401
        except ImportError as e:
            raise ImportError("TensorBoard needs tensorboardX: pip install tensorboardX") from e
        self.log_dir = os.fspath(log_dir)
        self.every = 1 if update_freq == "batch" else (None if update_freq == "epoch" else int(update_freq))
        self.writer: Any = None
        self.step = 0

    def on_train_begin(self, logs: dict | None = None) -> None:
        """Open the writer."""
        from tensorboardX import SummaryWriter

        os.makedirs(self.log_dir, exist_ok=True)
        self.writer = SummaryWriter(logdir=self.log_dir)
        self.step = int(self.params.get("initial_step", 0))

    def on_train_batch_end(self, step: int, logs: dict | None = None) -> None:
        """The batch loss, every ``update_freq`` batches."""
        self.step += 1
        loss = (logs or {}).get("loss")
        if self.every is not None and self.step % self.every == 0 and loss is not None and _number(loss):
            self.writer.add_scalar("batch/loss", float(loss), self.step)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """The epoch's scalars."""
        for key, v in (logs or {}).items():
            if not _number(v):
                continue
            if key in ("lr", "samples_per_s"):
                tag = key
            elif key.startswith("val_"):
                tag = "val/" + key[4:]
            else:
                tag = "train/" + key
            self.writer.add_scalar(tag, float(v), epoch)
        self.writer.flush()

    def on_train_end(self, logs: dict | None = None) -> None:
        """Close the writer."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
