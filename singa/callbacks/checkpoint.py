"""Save checkpoints while training (Keras's ``ModelCheckpoint``) through
:meth:`singa.model.Model.save_states`, which writes atomically: a crash or an error
never leaves a partial file, and a failed save keeps the previous file intact."""

from __future__ import annotations

import math
import os
import string

from singa.callbacks.base import Callback
from singa.callbacks.monitor import Monitor

__all__ = ["ModelCheckpoint", "FIT_STATE_KEY", "LOADER_STATE_KEY"]

#: the aux_states key of the run's position (``epoch`` done, ``step``, ``monitor_best``)
FIT_STATE_KEY = "singa_fit"
#: the aux_states key of the training loader's ``state_dict()`` (when it has one)
LOADER_STATE_KEY = "singa_fit_loader"


def _fields(path: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(path) if f}


def _rank_value(saved: tuple[str, float | None]) -> float:
    return math.inf if saved[1] is None else saved[1]  # with save_best_only every file has a value


class ModelCheckpoint(Callback):
    """Save the model's states (and its optimizer's, the device's random state and the
    position of the run) during training.

    Args:
        filepath: the file; it may hold ``{epoch}`` (1-based, as Keras), ``{step}``
            (training batches done) and any logged value (``{val_loss:.4f}``).
        monitor: the log key that ``save_best_only`` and ``keep`` with it rank by.
        mode: ``"min"``, ``"max"`` or ``"auto"`` (max for accuracy-like names).
        save_best_only: save only when ``monitor`` improves on the best so far.
        keep: keep only the N files written last (with ``save_best_only``, the N
            best), deleting older ones this callback wrote; None keeps all.
        every_n_steps: also save every N training batches (``{epoch}`` is then the
            epoch in progress); None saves at the end of each epoch only.
        save_freq: Keras's spelling: ``"epoch"`` or a number of batches.
        aux_states: more aux states to store in every file.

    Attributes:
        best: the best monitored value saved so far; ``saved``: the files written and
        still kept, oldest first.
    """

    def __init__(
        self,
        filepath: str | os.PathLike,
        monitor: str = "val_loss",
        verbose: int = 0,
        save_best_only: bool = False,
        mode: str = "auto",
        keep: int | None = None,
        every_n_steps: int | None = None,
        save_freq: str | int = "epoch",
        aux_states: dict | None = None,
    ):
        super().__init__()
        self.filepath = os.fspath(filepath)
        self.watch = Monitor(monitor, mode, 0.0, "ModelCheckpoint")
        if keep is not None and (not isinstance(keep, int) or isinstance(keep, bool) or keep < 1):
            raise ValueError(f"ModelCheckpoint: keep must be None or an int >= 1, got {keep!r}")
        if save_freq != "epoch":
            if every_n_steps is not None:
                raise ValueError("ModelCheckpoint: give every_n_steps or save_freq, not both")
            every_n_steps = save_freq  # type: ignore[assignment]
        if every_n_steps is not None and (
            not isinstance(every_n_steps, int) or isinstance(every_n_steps, bool) or every_n_steps < 1
        ):
            raise ValueError(
                f"ModelCheckpoint: every_n_steps must be None or an int >= 1, got {every_n_steps!r}"
            )
        if keep is not None and not _fields(self.filepath) & {"epoch", "step"} and not save_best_only:
            raise ValueError(
                f"ModelCheckpoint: keep={keep} needs a filepath with {{epoch}} or {{step}} "
                f"(every save overwrites {self.filepath!r})"
            )
        self.monitor = monitor
        self.verbose = verbose
        self.save_best_only = bool(save_best_only)
        self.keep = keep
        self.every_n_steps = every_n_steps
        self.aux_states = dict(aux_states or {})
        self.best: float | None = None
        self.saved: list[tuple[str, float | None]] = []
        self.step = 0
        self.epoch = 0

    def on_train_begin(self, logs: dict | None = None) -> None:
        """Count steps from where the run starts."""
        self.step = int(self.params.get("initial_step", 0))

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        """Remember the epoch in progress."""
        self.epoch = epoch

    def on_train_batch_end(self, step: int, logs: dict | None = None) -> None:
        """Count the batch; save every ``every_n_steps`` of them."""
        self.step += 1
        if self.every_n_steps is not None and self.step % self.every_n_steps == 0:
            self._save(self.epoch, dict(logs or {}), epoch_done=False)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """Save at the end of an epoch (unless saving by steps only)."""
        if self.every_n_steps is None:
            self._save(epoch, dict(logs or {}), epoch_done=True)

    def _save(self, epoch: int, logs: dict, epoch_done: bool) -> None:
        current = None
        if self.save_best_only:
            current = self.watch.value(logs)
            if current is None or not self.watch.improves(current, self.best):
                return
        elif self.monitor in logs and isinstance(logs[self.monitor], int | float):
            current = float(logs[self.monitor])
        path = self.format_path(epoch, logs)
        self.model.save_states(path, aux_states=self._aux(epoch, epoch_done))
        if self.save_best_only:
            self.best = current
        if self.verbose:
            print(f"Epoch {epoch + 1}: saved {path}")
        self._remember(path, current)

    def format_path(self, epoch: int, logs: dict) -> str:
        """The file name for ``epoch`` (0-based) and ``logs``."""
        try:
            return self.filepath.format(epoch=epoch + 1, step=self.step, **logs)
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(
                f"ModelCheckpoint: cannot fill in {self.filepath!r} ({type(e).__name__}: {e}); "
                f"fields available: epoch, step, {', '.join(sorted(logs))}"
            ) from e

    def _aux(self, epoch: int, epoch_done: bool) -> dict:
        aux = dict(self.aux_states)
        for cb in self.params.get("callbacks", ()):
            aux.update(cb.checkpoint_aux())
        aux[FIT_STATE_KEY] = {
            "epoch": epoch + 1 if epoch_done else epoch,
            "epoch_done": epoch_done,
            "step": self.step,
            "monitor": self.monitor,
            "best": self.best if self.best is None or math.isfinite(self.best) else None,
        }
        loader = self.params.get("loader")
        if loader is not None and callable(getattr(loader, "state_dict", None)):
            aux[LOADER_STATE_KEY] = loader.state_dict()
        accumulator = self.params.get("accumulator")
        if accumulator is not None:  # an update in progress (fit(..., accumulate=k))
            aux.update(accumulator.checkpoint_aux())
        return aux

    def _remember(self, path: str, value: float | None) -> None:
        self.saved = [(p, v) for p, v in self.saved if p != path]
        self.saved.append((path, value))
        if self.keep is None or len(self.saved) <= self.keep:
            return
        if self.save_best_only:  # the newest is the best; drop the worst
            order = sorted(self.saved, key=_rank_value, reverse=self.watch.mode == "max")
            drop = {p for p, _ in order[self.keep :]}
        else:
            drop = {p for p, _ in self.saved[: len(self.saved) - self.keep]}
        for p in drop:
            try:
                os.remove(p)
            except FileNotFoundError:
                pass
        self.saved = [(p, v) for p, v in self.saved if p not in drop]

    def state_dict(self) -> dict:
        """The best value and the files kept."""
        return {"best": self.best, "saved": [[p, v] for p, v in self.saved]}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.best = state.get("best")
        self.saved = [(str(p), v) for p, v in state.get("saved", [])]

    def __repr__(self) -> str:
        return f"ModelCheckpoint({self.filepath!r}, monitor={self.monitor!r}, keep={self.keep})"

    @staticmethod
    def fields(filepath: str) -> set[str]:
        """The format fields of a file path (``{epoch}``, ``{val_loss:.3f}``, ...)."""
        return _fields(filepath)
