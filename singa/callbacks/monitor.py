"""Watching one logged quantity: which direction is better (``mode``) and whether a
value improves on a reference by at least ``min_delta`` (Keras's rules)."""

from __future__ import annotations

import math
import warnings
from typing import Any

__all__ = ["Monitor", "resolve_mode"]

_MAX_WORDS = ("acc", "accuracy", "auc", "precision", "recall", "f1")


def resolve_mode(monitor: str, mode: str, who: str) -> str:
    """``"min"`` or ``"max"``: ``mode`` itself, or with ``"auto"`` max for accuracy-like
    names (``acc``, ``val_accuracy``, ``top5_accuracy``, ...) and min otherwise."""
    if mode not in ("auto", "min", "max"):
        raise ValueError(f"{who}: mode must be 'auto', 'min' or 'max', got {mode!r}")
    if mode != "auto":
        return mode
    name = monitor.lower().removeprefix("val_")
    return (
        "max" if any(name == w or name.endswith("_" + w) or name.endswith(w) for w in _MAX_WORDS) else "min"
    )


class Monitor:
    """One monitored log key with its direction and ``min_delta`` (>= 0)."""

    def __init__(self, monitor: str, mode: str, min_delta: float, who: str):
        if not isinstance(monitor, str) or not monitor:
            raise ValueError(f"{who}: monitor must be a log key such as 'val_loss', got {monitor!r}")
        if not (isinstance(min_delta, int | float) and math.isfinite(min_delta)):
            raise ValueError(f"{who}: min_delta must be a finite number, got {min_delta!r}")
        self.monitor = monitor
        self.mode = resolve_mode(monitor, mode, who)
        self.min_delta = abs(float(min_delta))
        self.who = who

    @property
    def worst(self) -> float:
        """The value every real value improves on."""
        return math.inf if self.mode == "min" else -math.inf

    def improves(self, value: float, reference: float | None) -> bool:
        """Whether ``value`` is better than ``reference`` by more than ``min_delta``
        (None: no reference yet, always an improvement)."""
        if reference is None:
            return True
        if self.mode == "min":
            return value + self.min_delta < reference
        return value - self.min_delta > reference

    def value(self, logs: dict | None) -> float | None:
        """The monitored value in ``logs`` (None, with a warning, when it is missing; a
        nan is returned and never improves on anything)."""
        v: Any = (logs or {}).get(self.monitor)
        if v is None or isinstance(v, bool) or not isinstance(v, int | float):
            known = ", ".join(sorted(logs or {}))
            warnings.warn(
                f"{self.who}: {self.monitor!r} is not available (logged: {known}); skipped",
                RuntimeWarning,
                stacklevel=3,
            )
            return None
        return float(v)
