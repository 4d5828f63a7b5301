"""Epoch records to files: :class:`CSVLogger` (Keras's, one row per epoch) and
:class:`JSONLogger` (JSON lines, the records ``singa-train --log`` writes)."""

from __future__ import annotations

import csv
import datetime
import json
import math
import os
from typing import Any, TextIO

from singa.callbacks.base import Callback

__all__ = ["CSVLogger", "JSONLogger", "cli_field", "json_value", "json_line"]


def json_value(v: Any) -> Any:
    """A log value as JSON: numpy scalars as Python numbers, nan and infinities as None."""
    if hasattr(v, "item") and not isinstance(v, str | bytes):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    return v


def _json_default(v: Any) -> Any:
    if hasattr(v, "item"):
        return v.item()
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    raise TypeError(f"not JSON serialisable: {v!r}")


def json_line(event: str, fields: dict) -> str:
    """One JSON-lines record (no newline): ``event``, ``time`` (ISO 8601, UTC, seconds)
    and ``fields`` (nan and infinities as null), strict JSON. ``singa-train --log`` writes
    its records with it too."""
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    rec = {"event": event, "time": now, **{k: json_value(v) for k, v in fields.items()}}
    return json.dumps(rec, allow_nan=False, default=_json_default)


class CSVLogger(Callback):
    """One CSV row per epoch: ``epoch`` (0-based, as Keras) then the log keys in sorted
    order (the keys of the first epoch fix the columns; a missing value is empty).

    Args:
        filename: the CSV file.
        separator: the field separator.
        append: add to an existing file (its header is kept) instead of truncating it.
    """

    def __init__(self, filename: str | os.PathLike, separator: str = ",", append: bool = False):
        super().__init__()
        self.filename = os.fspath(filename)
        self.sep = separator
        self.append = bool(append)
        self.keys: list[str] | None = None
        self._file: TextIO | None = None
        self._writer: Any = None

    def on_train_begin(self, logs: dict | None = None) -> None:
        """Open the file."""
        exists = self.append and os.path.exists(self.filename) and os.path.getsize(self.filename) > 0
        self._file = open(self.filename, "a" if self.append else "w", newline="", encoding="utf-8")  # noqa: SIM115
        self._writer = None
        if exists:
            with open(self.filename, encoding="utf-8") as f:
                header = f.readline().strip()
            self.keys = header.split(self.sep)[1:] if header else None

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """Write the epoch's row and flush it."""
        logs = logs or {}
        if self._file is None:
            self.on_train_begin()
        f = self._file
        if f is None:  # pragma: no cover - on_train_begin opened it
            return
        if self.keys is None:
            self.keys = sorted(logs)
        if self._writer is None:
            self._writer = csv.DictWriter(f, fieldnames=["epoch", *self.keys], delimiter=self.sep)
            if not (self.append and f.tell() > 0):
                self._writer.writeheader()
        row = {"epoch": epoch, **{k: _csv_value(logs.get(k)) for k in self.keys}}
        self._writer.writerow(row)
        f.flush()

    def on_train_end(self, logs: dict | None = None) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()
        self._file, self._writer = None, None


def _csv_value(v: Any) -> Any:
    v = json_value(v)
    return "" if v is None else v


_SHORT = {"accuracy": "acc"}
_AS_IS = ("lr", "samples_per_s", "epoch", "step")


def cli_field(key: str) -> str:
    """The name ``singa-train --log`` gives fit's log field ``key``: ``loss`` ->
    ``train_loss``, ``accuracy`` -> ``train_acc``, ``val_accuracy`` -> ``val_acc``,
    ``mae`` -> ``train_mae``; ``lr``, ``samples_per_s``, ``val_loss`` unchanged."""
    if key in _AS_IS:
        return key
    if key.startswith("val_"):
        return "val_" + _SHORT.get(key[4:], key[4:])
    return "train_" + _SHORT.get(key, key)


class JSONLogger(Callback):
    """Records as JSON lines, one object per event, each with ``event`` and ``time``
    (ISO 8601, UTC): ``start`` (with ``start_fields``), ``epoch`` (the epoch's logs
    plus ``epoch``, 1-based, and ``step``), ``end``. nan and infinities are written as
    null, so every line is strict JSON. The lines are :func:`json_line`'s, the writer
    of ``singa-train --log``, and the metrics carry its names (:func:`cli_field`:
    ``train_loss``, ``train_acc``, ``val_loss``, ``val_acc``, ``lr``), so the same tools
    read both.

    Args:
        path: the file.
        append: add to the file instead of truncating it.
        start_fields: more fields of the ``start`` record (e.g. the settings).
    """

    def __init__(self, path: str | os.PathLike, append: bool = False, start_fields: dict | None = None):
        super().__init__()
        self.path = os.fspath(path)
        self.append = bool(append)
        self.start_fields = dict(start_fields or {})
        self._file: TextIO | None = None
        self.step = 0

    def write(self, event: str, **fields: Any) -> None:
        """Append one record and flush it."""
        if self._file is None:
            self._file = open(self.path, "a" if self.append else "w", encoding="utf-8")  # noqa: SIM115
        self._file.write(json_line(event, fields) + "\n")
        self._file.flush()

    def on_train_begin(self, logs: dict | None = None) -> None:
        """Write the ``start`` record."""
        self.step = int(self.params.get("initial_step", 0))
        self.write(
            "start", epochs=self.params.get("epochs"), steps=self.params.get("steps"), **self.start_fields
        )

    def on_train_batch_end(self, step: int, logs: dict | None = None) -> None:
        """Count the batch."""
        self.step += 1

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """Write the ``epoch`` record, its metrics by the command line's names."""
        self.write(
            "epoch", epoch=epoch + 1, step=self.step, **{cli_field(k): v for k, v in (logs or {}).items()}
        )

    def on_train_end(self, logs: dict | None = None) -> None:
        """Write the ``end`` record and close the file."""
        self.write("end", step=self.step, **(logs or {}))
        if self._file is not None:
            self._file.close()
            self._file = None
