"""The checkpoint file format: the members a checkpoint zip holds, the state types
and dtypes it may store, the names it accepts, and the records that describe its
entries (``docs/checkpoint-format.md``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from singa.checkpoint.errors import CheckpointError

FORMAT = "singa-checkpoint"
FORMAT_VERSION = 1
TENSOR_DICT = "tensor_dict.npz"
STATES_ATTR = "states_attr.json"
EXTRA_STATES = "extra_states.json"
METADATA = "metadata.json"
MODEL_STATE, AUX_STATE, OPTIMIZER_STATE = 0, 1, 2  # states_attr.json "state_type"
AUX_TYPES = ("tensor", "ndarray", "scalar")
OPTIMIZER_PREFIX = "optimizer/"
EXTRA_KEYS = ("aux", "optimizer", "rng", "device")
#: dtypes of Apache SINGA's states_attr.json (its core DataType enum)
SINGA_DTYPES = {0: "float32", 1: "float16", 2: "int32", 4: "float64"}
MAX_JSON_BYTES = 64 << 20
MAX_NDIM = 64
_ALLOWED_KINDS = "biufc"


def check_dtype(dtype: Any, what: str) -> np.dtype:
    """The dtype if a checkpoint may hold it (bool, ints, floats, complex), else raise."""
    dt = np.dtype(dtype)
    if dt.kind not in _ALLOWED_KINDS or dt.fields is not None or dt.subdtype is not None:
        raise CheckpointError(f"{what}: dtype {dt} cannot be stored (only bool, int, uint, float, complex)")
    return dt


def safe_name(name: str) -> bool:
    """False for names that could escape a folder if extracted, or that are odd."""
    if not name or "\x00" in name or "\\" in name or name.startswith("/") or len(name) > 4096:
        return False
    if len(name) >= 2 and name[1] == ":":
        return False
    return all(part not in ("..", ".", "") for part in name.split("/"))


@dataclass
class ArrayEntry:
    """An array to store: its key in tensor_dict.npz, its state type, the host array
    (C- or F-contiguous) and extra attributes (``aux_type`` or ``slot``)."""

    key: str
    state_type: int
    array: np.ndarray
    extra: dict = field(default_factory=dict)


@dataclass
class ArrayMeta:
    """What a checkpoint says about one stored array."""

    key: str
    state_type: int
    shape: tuple
    dtype: np.dtype
    sha256: str | None
    aux_type: str | None = None
    slot: str | None = None

    @property
    def nbytes(self) -> int:
        """Size of the array's data."""
        return math.prod(self.shape) * self.dtype.itemsize


@dataclass
class Contents:
    """A checkpoint's validated contents (``values`` empty unless arrays were read)."""

    path: str
    format_version: int
    metadata: dict
    arrays: dict[str, ArrayMeta]
    values: dict[str, np.ndarray]
    aux_values: dict
    optimizer: dict | None
    rng: dict | None
    device: str | None
