"""``CheckpointManager``: numbered checkpoints in one folder, the last N and the best
M kept, saved synchronously or in the background (Orbax's ``CheckpointManager``,
Lightning's ``ModelCheckpoint(save_top_k, save_last)``).

The folder holds ``ckpt-<step>.zip`` files (each a :func:`save_model` checkpoint that
also records its step and metrics) and ``checkpoints.json``, the index listing the kept
ones with their metrics. A save writes the new file atomically, then the index
atomically, and only then deletes what retention drops; a crash at any moment leaves
every earlier checkpoint intact, and the next manager on the folder reads it (the
index, else the files), ignores and removes stray temporary files and lists complete
files that the index missed.

Example::

    mgr = CheckpointManager("ckpts", keep_last=2, keep_best=1, monitor="val_loss",
                            async_save=True)
    for step in range(start, steps):
        ...
        if step % 100 == 0:
            mgr.save(step, model, metrics={"val_loss": v}, aux_states={"loader": loader})
    mgr.wait()
    restored = mgr.restore(model, stateful={"loader": loader})   # newest valid one
"""

from __future__ import annotations

import math
import os
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from singa.checkpoint.background import BackgroundWriter
from singa.checkpoint.errors import CheckpointError, CheckpointWarning
from singa.checkpoint.fileformat.atomic import remove_stale_temporaries
from singa.checkpoint.fileformat.file_reading import read_checkpoint
from singa.checkpoint.index import (
    INDEX_NAME,
    MANAGER_KEY,
    Record,
    file_step,
    read_index,
    step_file,
    write_index,
)
from singa.checkpoint.states import model_saving

__all__ = ["CheckpointManager", "Restored", "newest_valid", "scan"]

_TMP_TAG = ".singa-tmp."


@dataclass
class Restored:
    """What :meth:`CheckpointManager.restore` loaded: the step, the file, its metrics,
    the aux states (as ``Model.load_states`` returns them) and the newer checkpoints
    skipped because they were damaged (one line each)."""

    step: int
    path: str
    metrics: dict
    aux_states: dict
    skipped: list[str] = field(default_factory=list)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_metrics(metrics: Mapping | None) -> dict:
    out = {}
    for k, v in (metrics or {}).items():
        if not isinstance(k, str):
            raise TypeError(f"CheckpointManager.save: metric names must be strings, got {k!r}")
        if isinstance(v, bool) or not isinstance(v, int | float):
            try:
                v = float(v)  # numpy scalars, 0-d arrays
            except (TypeError, ValueError):
                raise TypeError(f"CheckpointManager.save: metric {k!r} is not a number: {v!r}") from None
        out[k] = float(v)
    return out


def scan(directory: str, problems: list[str] | None = None) -> list[Record]:
    """The checkpoints of a manager's folder, oldest first, without changing it: the
    index's (files that exist), plus complete files the index does not list (a save
    killed before its index was written). A damaged index or file is noted in
    ``problems``."""
    problems = problems if problems is not None else []
    try:
        names = set(os.listdir(directory))
    except FileNotFoundError:
        return []
    indexed = read_index(directory)
    if indexed is None and INDEX_NAME in names:
        problems.append(f"{os.path.join(directory, INDEX_NAME)} is damaged; rebuilt from the files")
    records = {r.step: r for r in indexed or [] if r.file in names}
    for name in sorted(names):
        step = file_step(name)
        if step is None or step in records:
            continue
        rec = _adopt(directory, name, step, problems)
        if rec is not None:
            records[step] = rec
    return sorted(records.values(), key=lambda r: r.step)


def _adopt(directory: str, name: str, step: int, problems: list[str]) -> Record | None:
    path = os.path.join(directory, name)
    try:
        c = read_checkpoint(path, load=False)
    except (CheckpointError, OSError) as e:
        problems.append(f"{path} is not readable and was ignored: {str(e).splitlines()[0]}")
        return None
    info = c.aux_values.get(MANAGER_KEY)
    metrics = info.get("metrics", {}) if isinstance(info, dict) else {}
    return Record(step, name, dict(metrics) if isinstance(metrics, dict) else {})


def newest_valid(directory: str | os.PathLike) -> tuple[int, str, list[str]] | None:
    """The newest checkpoint of a manager's folder that reads back whole (every array
    checked against its SHA-256): ``(step, path, skipped)`` with one line per damaged
    newer file skipped, or None when the folder holds none (nothing is changed).
    Raises :class:`CheckpointError` when every checkpoint is damaged."""
    directory = os.fspath(directory)
    skipped: list[str] = []
    for r in reversed(scan(directory)):
        path = os.path.join(directory, r.file)
        try:
            read_checkpoint(path, load=True)
        except (CheckpointError, OSError) as e:
            skipped.append(f"{path}: {str(e).splitlines()[0]}")
            continue
        return r.step, path, skipped
    if skipped:
        raise CheckpointError(f"no readable checkpoint in {directory}:\n  " + "\n  ".join(skipped))
    return None


class CheckpointManager:
    """Numbered checkpoints of a model in ``directory`` with a retention policy.

    Args:
        directory: the folder (created if needed).
        keep_last: keep the checkpoints of the N newest steps (None keeps every one).
        keep_best: also keep the M best by ``monitor`` (checkpoints saved without that
            metric, or with a NaN, are never "best").
        monitor: the metric ``keep_best`` and :meth:`best` rank by.
        mode: ``"min"`` or ``"max"``: whether a smaller or a larger value is better.
        async_save: copy the states on the calling thread and write the file in the
            background while training goes on (one save in flight; the next waits).
        compress: deflate the arrays (smaller, slower).
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        keep_last: int | None = 3,
        keep_best: int = 0,
        monitor: str | None = None,
        mode: str = "min",
        async_save: bool = False,
        compress: bool = False,
    ):
        if keep_last is not None and (not _is_int(keep_last) or keep_last < 0):
            raise ValueError(f"CheckpointManager: keep_last must be None or an int >= 0, got {keep_last!r}")
        if not _is_int(keep_best) or keep_best < 0:
            raise ValueError(f"CheckpointManager: keep_best must be an int >= 0, got {keep_best!r}")
        if mode not in ("min", "max"):
            raise ValueError(f"CheckpointManager: mode must be 'min' or 'max', got {mode!r}")
        if keep_best and not monitor:
            raise ValueError("CheckpointManager: keep_best needs a monitor (the metric to rank by)")
        if keep_last == 0 and not keep_best:
            raise ValueError("CheckpointManager: keep_last=0 and keep_best=0 would keep nothing")
        self.directory = os.path.abspath(os.fspath(directory))
        if os.path.exists(self.directory) and not os.path.isdir(self.directory):
            raise NotADirectoryError(f"CheckpointManager: {self.directory} exists and is not a folder")
        os.makedirs(self.directory, exist_ok=True)
        self.keep_last, self.keep_best, self.monitor, self.mode = keep_last, keep_best, monitor, mode
        self.async_save, self.compress = bool(async_save), bool(compress)
        self._lock = threading.Lock()
        self._writer = BackgroundWriter() if self.async_save else None
        #: notes about damaged or unreadable files met while reading the folder
        self.problems: list[str] = []
        self._records = self._scan()

    # ----- reading the folder ------------------------------------------------------------------
    def _scan(self) -> list[Record]:
        """Clean stray temporaries, then list the kept checkpoints (see :func:`scan`)."""
        self.clean()
        return scan(self.directory, self.problems)

    def clean(self) -> list[str]:
        """Remove temporary files that killed saves left in the folder (those of live
        processes are kept). Returns the removed paths."""
        removed = []
        for name in os.listdir(self.directory):
            if name.startswith(".") and _TMP_TAG in name:
                base = name[1 : name.index(_TMP_TAG)]
                removed += remove_stale_temporaries(self.directory, base)
        return removed

    # ----- queries ----------------------------------------------------------------------------
    def all(self) -> list[int]:
        """The steps of the kept checkpoints whose save has finished, oldest first."""
        with self._lock:
            return [r.step for r in self._records]

    def latest(self) -> int | None:
        """The newest saved step, or None."""
        steps = self.all()
        return steps[-1] if steps else None

    def best(self) -> int | None:
        """The step with the best ``monitor`` value (the newer one on a tie), or None."""
        with self._lock:
            ranked = self._ranked(self._records)
        return ranked[0].step if ranked else None

    def metrics(self, step: int) -> dict:
        """The metrics saved with ``step``."""
        return dict(self._record(step).metrics)

    def path(self, step: int) -> str:
        """The file of ``step``'s checkpoint."""
        return os.path.join(self.directory, self._record(step).file)

    def _record(self, step: int) -> Record:
        with self._lock:
            for r in self._records:
                if r.step == step:
                    return r
        raise KeyError(
            f"CheckpointManager: no checkpoint of step {step} in {self.directory} (steps: {self.all()})"
        )

    def _ranked(self, records: list[Record]) -> list[Record]:
        scored = [r for r in records if r.value(self.monitor) is not None]
        sign = 1.0 if self.mode == "min" else -1.0
        return sorted(scored, key=lambda r: (sign * r.value(self.monitor), -r.step))  # type: ignore[operator]

    # ----- saving -----------------------------------------------------------------------------
    def save(
        self, step: int, model: Any, metrics: Mapping | None = None, aux_states: Mapping | None = None
    ) -> str:
        """Save ``model`` (its states, its optimizer's, the device's random state) as the
        checkpoint of ``step``, with ``metrics`` (numbers) and ``aux_states`` (as
        ``Model.save_states`` takes them; an object with ``state_dict()``, such as a
        ``DataLoader``, is stored as its state). With ``async_save`` the states are
        copied now and written in the background; an error of the previous background
        save is raised here first. Returns the file's path."""
        self.wait()
        if not _is_int(step) or step < 0:
            raise ValueError(f"CheckpointManager.save: step must be an int >= 0, got {step!r}")
        metrics = _check_metrics(metrics)
        aux = {}
        for k, v in (aux_states or {}).items():
            aux[k] = v.state_dict() if callable(getattr(v, "state_dict", None)) else v
        if MANAGER_KEY in aux:
            raise ValueError(f"CheckpointManager.save: aux_states key {MANAGER_KEY!r} is reserved")
        aux[MANAGER_KEY] = {
            "step": step,
            "metrics": {k: v if math.isfinite(v) else None for k, v in metrics.items()},
        }
        opt = getattr(model, "optimizer", None)
        snap = model_saving.snapshot(
            model, optimizer=opt, params=None, aux_states=aux, with_rng=True, copy=self.async_save
        )
        record = Record(step, step_file(step), metrics)
        if self._writer is None:
            self._commit(snap, record)
        else:
            self._writer.submit(lambda: self._commit(snap, record), f"of step {step}")
        return os.path.join(self.directory, record.file)

    def _commit(self, snap: model_saving.Snapshot, record: Record) -> None:
        """Write the file, then the index, then apply retention."""
        model_saving.write_snapshot(os.path.join(self.directory, record.file), snap, compress=self.compress)
        with self._lock:
            records = sorted(
                [r for r in self._records if r.step != record.step] + [record], key=lambda r: r.step
            )
            kept = self._retained(records)
        write_index(self.directory, kept, self.monitor, self.mode)
        with self._lock:
            self._records = kept
        self._remove_unlisted({r.file for r in kept})

    def _retained(self, records: list[Record]) -> list[Record]:
        keep = set()
        if self.keep_last is None:
            keep = {r.step for r in records}
        elif self.keep_last:
            keep = {r.step for r in records[-self.keep_last :]}
        keep |= {r.step for r in self._ranked(records)[: self.keep_best]}
        return [r for r in records if r.step in keep]

    def _remove_unlisted(self, listed: set[str]) -> None:
        for name in os.listdir(self.directory):
            if file_step(name) is not None and name not in listed:
                try:
                    os.remove(os.path.join(self.directory, name))
                except FileNotFoundError:
                    pass
        self.clean()

    def wait(self) -> None:
        """Block until a background save is written; raise its error if it failed."""
        if self._writer is not None:
            self._writer.wait()

    # ----- restoring --------------------------------------------------------------------------
    def restore(
        self,
        model: Any,
        step: int | None = None,
        *,
        stateful: Mapping[str, Any] | None = None,
        strict: bool = True,
    ) -> Restored | None:
        """Load a checkpoint into ``model`` (states, optimizer, random state): ``step``'s,
        or the newest valid one when ``step`` is None; a damaged newer file is reported
        (a :class:`CheckpointWarning`) and skipped, never loaded. ``stateful`` maps aux
        keys to objects with ``load_state_dict`` (a ``DataLoader``) to restore too.
        Returns None when the folder has no checkpoint (``step`` None). A checkpoint of
        another model raises :class:`CheckpointError` and changes nothing."""
        self.wait()
        if step is not None:
            self._record(step)
            candidates = [step]
        else:
            candidates = list(reversed(self.all()))
        skipped: list[str] = []
        for s in candidates:
            path = os.path.join(self.directory, step_file(s))
            try:
                contents = read_checkpoint(path, load=True)
            except (CheckpointError, OSError) as e:
                if step is not None:
                    raise
                line = f"{path}: {str(e).splitlines()[0]}"
                warnings.warn(f"skipping a damaged checkpoint: {line}", CheckpointWarning, stacklevel=2)
                skipped.append(line)
                continue
            aux = self._load(model, path, contents.aux_values, stateful or {}, strict)
            aux.pop(MANAGER_KEY, None)
            return Restored(s, path, self._record(s).metrics, aux, skipped)
        if skipped:
            raise CheckpointError(f"no readable checkpoint in {self.directory}:\n  " + "\n  ".join(skipped))
        return None

    @staticmethod
    def _load(model: Any, path: str, aux_values: dict, stateful: Mapping[str, Any], strict: bool) -> dict:
        """Restore the stateful objects, then the model; undo the objects' on failure."""
        before = {}
        try:
            for key, obj in stateful.items():
                if key not in aux_values:
                    raise CheckpointError(f"{path!r} holds no aux state {key!r} (has: {sorted(aux_values)})")
                before[key] = obj.state_dict()
                try:
                    obj.load_state_dict(aux_values[key])
                except ValueError as e:
                    del before[key]
                    raise CheckpointError(f"{path!r}: aux state {key!r} does not fit: {e}") from e
            return model.load_states(path, strict=strict)
        except BaseException:
            for key, state in before.items():
                stateful[key].load_state_dict(state)
            raise

    def __repr__(self) -> str:
        return (
            f"CheckpointManager({self.directory!r}, keep_last={self.keep_last}, keep_best={self.keep_best}, "
            f"monitor={self.monitor!r}, mode={self.mode!r}, async_save={self.async_save})"
        )
