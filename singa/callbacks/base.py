"""The callback contract of :meth:`singa.model.Model.fit` (Keras's): a
:class:`Callback` is told when training, each epoch, each training batch and each
validation begins and ends; it may read ``self.model``, change the optimizer, and
stop the run by setting ``self.model.stop_training = True`` (the loop ends after the
current batch, running the epoch-end and train-end hooks).

``logs`` dicts: ``on_train_batch_end(step, logs)`` gets ``loss`` (the batch's) and
``size``; ``on_epoch_end(epoch, logs)`` gets the epoch's ``loss`` and metrics, the
validation ones prefixed ``val_``, ``lr`` and ``samples_per_s``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["Callback", "CallbackList", "History"]


class Callback:
    """Base class of callbacks: every hook does nothing.

    Attributes:
        model: the model being trained (set by :meth:`set_model`).
        params: the run's settings (``epochs``, ``steps``, ``verbose``, ...), set by
            :meth:`set_params`.
    """

    def __init__(self) -> None:
        self.model: Any = None
        self.params: dict = {}

    def set_model(self, model: Any) -> None:
        """Attach the model being trained."""
        self.model = model

    def set_params(self, params: dict) -> None:
        """Attach the run's settings."""
        self.params = params

    def on_train_begin(self, logs: dict | None = None) -> None:
        """Training starts."""

    def on_train_end(self, logs: dict | None = None) -> None:
        """Training ended (also after a stop)."""

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        """Epoch ``epoch`` (0-based) starts."""

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """Epoch ``epoch`` ended (validation included); ``logs`` holds its metrics."""

    def on_train_batch_begin(self, step: int, logs: dict | None = None) -> None:
        """Training batch ``step`` (0-based within the epoch) starts."""

    def on_train_batch_end(self, step: int, logs: dict | None = None) -> None:
        """Training batch ``step`` ended; ``logs`` has its ``loss``."""

    def on_test_begin(self, logs: dict | None = None) -> None:
        """A validation pass (or :meth:`~singa.model.Model.evaluate`) starts."""

    def on_test_end(self, logs: dict | None = None) -> None:
        """The validation pass ended; ``logs`` holds its metrics."""

    def state_dict(self) -> dict:
        """What a checkpoint keeps of this callback (JSON values; default: nothing)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned."""

    def checkpoint_aux(self) -> dict:
        """Arrays this callback adds to every checkpoint's aux states (default: none)."""
        return {}


class CallbackList(Callback):
    """Calls each hook on every callback in order."""

    def __init__(self, callbacks: Iterable[Callback] = ()):
        super().__init__()
        self.callbacks = list(callbacks)
        for cb in self.callbacks:
            if not isinstance(cb, Callback):
                raise TypeError(f"callbacks must be singa.callbacks.Callback objects, got {cb!r}")

    def append(self, cb: Callback) -> None:
        """Add one more callback at the end."""
        self.callbacks.append(cb)

    def set_model(self, model: Any) -> None:
        """Attach the model to every callback."""
        super().set_model(model)
        for cb in self.callbacks:
            cb.set_model(model)

    def set_params(self, params: dict) -> None:
        """Attach the settings to every callback."""
        super().set_params(params)
        for cb in self.callbacks:
            cb.set_params(params)

    def on_train_begin(self, logs: dict | None = None) -> None:
        """See :meth:`Callback.on_train_begin`."""
        for cb in self.callbacks:
            cb.on_train_begin(logs)

    def on_train_end(self, logs: dict | None = None) -> None:
        """See :meth:`Callback.on_train_end`."""
        for cb in self.callbacks:
            cb.on_train_end(logs)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        """See :meth:`Callback.on_epoch_begin`."""
        for cb in self.callbacks:
            cb.on_epoch_begin(epoch, logs)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """See :meth:`Callback.on_epoch_end`."""
        for cb in self.callbacks:
            cb.on_epoch_end(epoch, logs)

    def implements_train_batch_hooks(self) -> bool:
        """Whether any callback overrides a training-batch hook (Keras's check): without
        one, fit neither calls them nor builds the per-batch logs."""
        return any(
            type(cb).on_train_batch_begin is not Callback.on_train_batch_begin
            or type(cb).on_train_batch_end is not Callback.on_train_batch_end
            for cb in self.callbacks
        )

    def on_train_batch_begin(self, step: int, logs: dict | None = None) -> None:
        """See :meth:`Callback.on_train_batch_begin`."""
        for cb in self.callbacks:
            cb.on_train_batch_begin(step, logs)

    def on_train_batch_end(self, step: int, logs: dict | None = None) -> None:
        """See :meth:`Callback.on_train_batch_end`."""
        for cb in self.callbacks:
            cb.on_train_batch_end(step, logs)

    def on_test_begin(self, logs: dict | None = None) -> None:
        """See :meth:`Callback.on_test_begin`."""
        for cb in self.callbacks:
            cb.on_test_begin(logs)

    def on_test_end(self, logs: dict | None = None) -> None:
        """See :meth:`Callback.on_test_end`."""
        for cb in self.callbacks:
            cb.on_test_end(logs)


class History(Callback):
    """What :meth:`~singa.model.Model.fit` returns: ``history`` maps each log key to
    its per-epoch list, ``epoch`` lists the epochs (0-based) in order."""

    def __init__(self) -> None:
        super().__init__()
        self.history: dict[str, list] = {}
        self.epoch: list[int] = []

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """Append the epoch's logs."""
        self.epoch.append(epoch)
        for k, v in (logs or {}).items():
            self.history.setdefault(k, []).append(v)

    def __repr__(self) -> str:
        return f"History(epochs={len(self.epoch)}, keys={sorted(self.history)})"
