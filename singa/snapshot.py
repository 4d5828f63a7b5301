"""SINGA's ``Snapshot``: write named tensors to a file and read them back.

SINGA's C++ snapshot writes its own binary record file (``<prefix>.bin`` holding
serialized protobuf ``TensorProto`` records, plus a ``<prefix>.desc`` text index).
This package does not read or write that format: a snapshot here is ``<prefix>.npz``,
a zip of ``.npy`` arrays read with ``allow_pickle=False`` (no pickle, safe to load
from others). SINGA marks the module deprecated in favour of model checkpoints
(:meth:`singa.model.Model.save_states`); it is kept for programs that use it.

In write mode the tensors are collected and the file is written when the snapshot is
closed (``close()``, the end of a ``with`` block, or when the object is released),
atomically: a failed write leaves any previous file intact.

Example::

    from singa import snapshot
    with snapshot.Snapshot("params", True) as sn:
        for name, t in model.get_params().items():
            sn.write(name, t)
    params = snapshot.Snapshot("params", False).read()   # {name: Tensor}
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np

from singa import tensor as _tensor

__all__ = ["Snapshot"]


def _file_of(prefix: str) -> str:
    return prefix if prefix.endswith(".npz") else prefix + ".npz"


class Snapshot:
    """Named tensors in ``<f>.npz``.

    Args:
        f: the file prefix (``.npz`` is added unless present).
        mode: True to write, False to read (as SINGA).
        buffer_size: accepted for SINGA's signature (MB); unused.
    """

    def __init__(self, f: str, mode: bool, buffer_size: int = 10):
        self.path = _file_of(os.fspath(f))
        self.mode = bool(mode)
        self._pending: dict[str, np.ndarray] | None = {} if self.mode else None
        if not self.mode and not os.path.isfile(self.path):
            raise FileNotFoundError(f"Snapshot: no snapshot file {self.path}")

    def write(self, param_name: str, param_val: Any) -> None:
        """Add one tensor (or array) under ``param_name`` (names must be unique)."""
        if self._pending is None:
            raise RuntimeError(f"Snapshot: {self.path} is open for reading or already closed")
        if not isinstance(param_name, str) or not param_name:
            raise ValueError(f"Snapshot.write: the name must be a non-empty string, got {param_name!r}")
        if param_name in self._pending:
            raise ValueError(f"Snapshot.write: {param_name!r} was already written")
        arr = param_val.to_numpy() if isinstance(param_val, _tensor.Tensor) else np.array(param_val)
        if arr.dtype.hasobject:
            raise TypeError(f"Snapshot.write: {param_name!r} is not a numeric array")
        self._pending[param_name] = arr

    def close(self) -> None:
        """Write the collected tensors (write mode; a no-op otherwise or when closed)."""
        if self._pending is None:
            return
        pending, self._pending = self._pending, None
        folder = os.path.dirname(os.path.abspath(self.path))
        fd, tmp = tempfile.mkstemp(prefix=".snapshot-", suffix=".npz", dir=folder)
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, allow_pickle=False, **pending)
            os.replace(tmp, self.path)
        except BaseException:
            os.unlink(tmp)
            raise

    def read(self) -> dict[str, _tensor.Tensor]:
        """All tensors of the file, by name."""
        if self.mode:
            raise RuntimeError(f"Snapshot: {self.path} is open for writing")
        with np.load(self.path, allow_pickle=False) as z:
            return {name: _tensor.from_numpy(z[name]) for name in z.files}

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self._pending = None  # an error inside the block: keep any previous file

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # nothing can be reported from a finalizer
            pass
