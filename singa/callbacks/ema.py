"""An exponential moving average of the weights (:class:`EMA`), used for validation
and saved in checkpoints."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from singa.callbacks.base import Callback

__all__ = ["EMA", "EMA_PREFIX"]

#: the aux_states key prefix of the averaged parameters in checkpoints (``ema/<name>``)
EMA_PREFIX = "ema/"


class EMA(Callback):
    """Keep ``average = decay * average + (1 - decay) * param`` of every trainable
    parameter, updated after each training batch (starting from the weights at the
    start of training).

    Validation (and ``evaluate`` within ``fit``) runs on the averages: they are swapped
    into the model for the pass and swapped back afterwards. :class:`ModelCheckpoint`
    stores them as aux states ``ema/<parameter name>``. A model that fit builds on its
    first batch starts its averages at the weights after that batch. With ``apply_at_end`` (the
    default, as Keras's ``use_ema``) the model keeps the averages when training ends.

    Args:
        decay: the weight of the old average, in [0, 1).
        apply_at_end: copy the averages into the model at the end of training.
    """

    def __init__(self, decay: float = 0.999, apply_at_end: bool = True):
        super().__init__()
        if not (isinstance(decay, int | float) and 0 <= decay < 1):
            raise ValueError(f"EMA: decay must be in [0, 1), got {decay!r}")
        self.decay = float(decay)
        self.apply_at_end = bool(apply_at_end)
        self.average: dict[str, Any] = {}
        self.updates = 0

    def on_train_begin(self, logs: dict | None = None) -> None:
        """Start the averages at the current weights (kept if already started, e.g.
        loaded from a checkpoint)."""
        if not self.average:
            self.average = {n: p.data.copy() for n, p in self.model.get_params().items()}

    def on_train_batch_end(self, step: int, logs: dict | None = None) -> None:
        """Move the averages towards the new weights (a model built by fit on its first
        batch starts its averages at the weights after that batch)."""
        d = self.decay
        params = self.model.get_params()
        if set(self.average) != set(params):
            self.average = {n: p.data.copy() for n, p in params.items()}
        for n, p in params.items():
            a = self.average[n]
            a *= d
            a += (1 - d) * p.data
        self.updates += 1

    @contextlib.contextmanager
    def swapped(self) -> Iterator[None]:
        """The averages in the model for the block; the weights back afterwards."""
        params = self.model.get_params()
        saved = {n: p.data.copy() for n, p in params.items()}
        self.model.set_states(self.average, strict=False)
        try:
            yield
        finally:
            self.model.set_states(saved, strict=False)

    def on_test_begin(self, logs: dict | None = None) -> None:
        """Validate on the averages."""
        self._swap = self.swapped()
        self._swap.__enter__()

    def on_test_end(self, logs: dict | None = None) -> None:
        """Put the weights back."""
        swap = self.__dict__.pop("_swap", None)
        if swap is not None:
            swap.__exit__(None, None, None)

    def on_train_end(self, logs: dict | None = None) -> None:
        """Keep the averages when ``apply_at_end``."""
        if self.apply_at_end and self.average:
            self.model.set_states(self.average, strict=False)

    def checkpoint_aux(self) -> dict:
        """The averages as aux states for a checkpoint."""
        return {EMA_PREFIX + n: a for n, a in self.average.items()}

    def load_aux(self, aux: dict) -> None:
        """Take the averages from a checkpoint's aux states (what ``load_states``
        returned), to continue a run with them."""
        got = {k[len(EMA_PREFIX) :]: v for k, v in aux.items() if k.startswith(EMA_PREFIX)}
        if got:
            self.average = {n: (v.copy() if hasattr(v, "copy") else v) for n, v in got.items()}
