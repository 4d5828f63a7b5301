"""The index of a :class:`~singa.checkpoint.manager.CheckpointManager`'s
folder: one JSON file listing the kept checkpoints (step, file name, metrics),
replaced atomically after each save, and the names of the step files."""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field

from singa.checkpoint.fileformat.atomic import atomic_write

#: the index file in a manager's folder
INDEX_NAME = "checkpoints.json"
#: the version of the index's layout
INDEX_VERSION = 1
#: the aux_states key under which the manager stores a checkpoint's step and metrics
MANAGER_KEY = "singa_checkpoint_manager"

_STEP_FILE = re.compile(r"^ckpt-(\d{1,18})\.zip$")
_MAX_INDEX_BYTES = 64 << 20


@dataclass
class Record:
    """One kept checkpoint: its step, its file name in the folder, its metrics."""

    step: int
    file: str
    metrics: dict = field(default_factory=dict)

    def value(self, key: str | None) -> float | None:
        """The finite number ``metrics[key]``, or None."""
        v = self.metrics.get(key) if key is not None else None
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            return None
        return float(v)


def step_file(step: int) -> str:
    """The file name of the checkpoint of ``step``."""
    return f"ckpt-{step:09d}.zip"


def file_step(name: str) -> int | None:
    """The step of a checkpoint file name, or None for another name."""
    m = _STEP_FILE.match(name)
    return int(m.group(1)) if m else None


def read_index(folder: str) -> list[Record] | None:
    """The records listed by the folder's index, oldest step first; None when there
    is no index or it cannot be read (the caller rebuilds it from the files)."""
    path = os.path.join(folder, INDEX_NAME)
    try:
        if os.path.getsize(path) > _MAX_INDEX_BYTES:
            return None
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if doc.get("version") != INDEX_VERSION:
            return None
        records = [_record(d) for d in doc["checkpoints"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if any(r is None for r in records):
        return None
    return sorted(records, key=lambda r: r.step)  # type: ignore[arg-type,return-value]


def _record(d: dict) -> Record | None:
    step, name, metrics = d["step"], d["file"], d.get("metrics", {})
    if type(step) is not int or step < 0 or name != step_file(step) or not isinstance(metrics, dict):
        return None
    return Record(step, name, dict(metrics))


def write_index(folder: str, records: list[Record], monitor: str | None, mode: str) -> None:
    """Replace the folder's index atomically (fsynced file and folder)."""
    doc = {
        "version": INDEX_VERSION,
        "monitor": monitor,
        "mode": mode,
        "checkpoints": [{"step": r.step, "file": r.file, "metrics": r.metrics} for r in records],
    }
    data = json.dumps(doc, indent=1, allow_nan=True).encode("utf-8")
    atomic_write(os.path.join(folder, INDEX_NAME), lambda f: f.write(data))
