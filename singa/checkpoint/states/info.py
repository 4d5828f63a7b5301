"""What :func:`singa.checkpoint.read` reports about a checkpoint, without a model."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from singa.checkpoint.fileformat.layout import AUX_STATE, MODEL_STATE, OPTIMIZER_STATE, Contents


@dataclass(frozen=True)
class ArrayInfo:
    """One stored array: ``kind`` is "model", "aux" or "optimizer"."""

    key: str
    kind: str
    shape: tuple
    dtype: np.dtype
    nbytes: int
    sha256: str | None


@dataclass
class CheckpointInfo:
    """What :func:`read` finds in a checkpoint, without a model."""

    path: str
    format_version: int
    metadata: dict
    arrays: dict[str, ArrayInfo]
    aux_values: dict
    optimizer: dict | None
    rng: dict | None

    @property
    def names(self) -> list[str]:
        """Names of the model states (parameters and buffers)."""
        return [k for k, a in self.arrays.items() if a.kind == "model"]

    @property
    def shapes(self) -> dict[str, tuple]:
        """Shape of every model state."""
        return {k: a.shape for k, a in self.arrays.items() if a.kind == "model"}

    @property
    def dtypes(self) -> dict[str, np.dtype]:
        """Dtype of every model state."""
        return {k: a.dtype for k, a in self.arrays.items() if a.kind == "model"}

    @property
    def nbytes(self) -> int:
        """Total size of the stored arrays."""
        return sum(a.nbytes for a in self.arrays.values())


_KINDS = {MODEL_STATE: "model", AUX_STATE: "aux", OPTIMIZER_STATE: "optimizer"}


def describe(c: Contents) -> CheckpointInfo:
    """The :class:`CheckpointInfo` of validated contents."""
    arrays = {
        k: ArrayInfo(k, _KINDS[m.state_type], m.shape, m.dtype, m.nbytes, m.sha256)
        for k, m in c.arrays.items()
    }
    return CheckpointInfo(c.path, c.format_version, c.metadata, arrays, c.aux_values, c.optimizer, c.rng)
