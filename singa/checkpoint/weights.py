"""Weights in the safetensors format: ``save_weights`` / ``load_weights``.

The file holds the model's states (parameters and buffers) under their dotted names,
as ``Model.get_states()`` names them, and nothing else (no optimizer, no random
state). It opens with ``safetensors.numpy.load_file`` (or ``safetensors.torch``);
loading checks names, shapes and dtypes like ``Model.load_states`` and changes
nothing on failure. A file written by safetensors from a PyTorch ``state_dict`` loads
where the names and layouts agree; where they do not, the error says how (PyTorch's
``Linear.weight`` is (out, in), SINGA's ``Linear.W`` is (in, out))."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from singa.checkpoint.errors import CheckpointError
from singa.checkpoint.fileformat.atomic import atomic_write
from singa.checkpoint.states.model_loading import LoadReport, load_arrays
from singa.checkpoint.states.model_saving import snapshot

__all__ = ["save_weights", "load_weights", "read_weights"]

_TORCH_SUFFIXES = (".weight", ".bias", ".running_mean", ".running_var", ".num_batches_tracked")


def _safetensors() -> Any:
    try:
        import safetensors.numpy as st
    except ImportError as e:  # a dependency; only a broken install lacks it
        raise ImportError(
            "save_weights/load_weights need the 'safetensors' package (pip install safetensors)"
        ) from e
    return st


def save_weights(model: Any, path: str | os.PathLike, metadata: dict[str, str] | None = None) -> str:
    """Write ``model``'s states (parameters and buffers, by dotted name) to the
    safetensors file ``path``, atomically; ``metadata`` is stored as the file's string
    metadata. Returns the path written."""
    st = _safetensors()
    meta = {"format": "singa"}
    for k, v in (metadata or {}).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"save_weights: metadata must map strings to strings, got {k!r}: {v!r}")
        meta[k] = v
    snap = snapshot(model, optimizer=None, params=None, aux_states=None, with_rng=False)
    arrays = {e.key: np.ascontiguousarray(e.array) for e in snap.entries}
    data = st.save(arrays, metadata=meta)
    return atomic_write(path, lambda f: f.write(data))


def load_weights(model: Any, path: str | os.PathLike, strict: bool = True) -> LoadReport:
    """Load a safetensors file written by :func:`save_weights` (or by safetensors from
    a PyTorch ``state_dict`` with the same names and layouts) into ``model``.

    Names, shapes and dtypes are checked first; with ``strict=True`` any problem raises
    :class:`CheckpointError` listing every one (and how a PyTorch file differs) and
    nothing changes; with ``strict=False`` what matches is loaded and the rest is in
    the returned :class:`LoadReport`."""
    arrays = read_weights(path)
    return load_arrays(model, arrays, label=repr(os.fspath(path)), strict=strict, hint=_torch_hint)


def read_weights(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The named numpy arrays of the safetensors file ``path`` (no pickle), or a
    :class:`CheckpointError` naming the file when it cannot be read or is not one.
    :func:`load_weights` and ``singa-train --init`` read files through it."""
    st = _safetensors()
    label = repr(os.fspath(path))
    try:
        with open(path, "rb") as f:
            data = f.read()
        return dict(st.load(data))
    except OSError as e:
        raise CheckpointError(f"cannot read {label}: {e.strerror or e}") from e
    except Exception as e:  # safetensors raises its own SafetensorError for bad files
        raise CheckpointError(f"{label} is not a valid safetensors file: {e}") from e


def _reversed_2d(line: str) -> bool:
    """True for a ``mismatched`` line whose found 2-D shape is the expected one reversed."""
    try:
        exp = line.split("expected ", 1)[1].split(")", 1)[0] + ")"
        got = line.split("found ", 1)[1].split(")", 1)[0] + ")"
    except IndexError:
        return False
    a = [s.strip() for s in exp.strip("()").split(",") if s.strip()]
    b = [s.strip() for s in got.strip("()").split(",") if s.strip()]
    return len(a) == 2 and a == b[::-1] and a != b


def _torch_hint(report: LoadReport) -> str:
    """How a PyTorch-written file differs from this model, if it looks like one."""
    lines = []
    if any(u.split(" ", 1)[0].endswith(_TORCH_SUFFIXES) for u in report.unexpected) and report.missing:
        lines.append(
            "the file uses PyTorch's state_dict names (.weight, .bias, ...); this model's states are "
            "named " + ", ".join(m.split(" ", 1)[0] for m in report.missing[:4]) + ": rename the keys"
        )
    if any(_reversed_2d(m) for m in report.mismatched):
        lines.append(
            "a 2-D weight is stored transposed: PyTorch's Linear.weight is (out, in), SINGA's Linear.W "
            "is (in, out); save weight.T under the SINGA name"
        )
    return "\n".join("hint: " + line for line in lines)
