"""``--init FILE``: start a model from the parameters of a checkpoint zip, an ONNX file or
a safetensors file, loading every state whose dotted name and shape match and listing
the ones left as initialised (e.g. the head when the number of classes differs).

safetensors files are read by :func:`singa.checkpoint.read_weights` (numpy arrays, no
pickle; the reader of ``load_weights``); ONNX files with ``onnx`` (the initializers,
named as the exporter names the parameters); checkpoints with :func:`singa.checkpoint.read_arrays` (the model
states, checksums verified).
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["InitReport", "read_weights", "load_matching"]


@dataclass
class InitReport:
    """What ``--init`` loaded: ``loaded`` names, ``left`` (name: reason) of the model's
    states kept as initialised, ``unused`` names of the file's arrays not loaded."""

    path: str
    loaded: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line for the console."""
        n = len(self.loaded) + len(self.left)
        text = f"  init: loaded {len(self.loaded)} of {n} state tensors from {self.path}"
        if self.left:
            text += f"; {len(self.left)} left as initialised"
        if self.unused:
            text += f"; {len(self.unused)} arrays of the file unused"
        return text

    def details(self) -> list[str]:
        """One line per state left as initialised."""
        return [f"left as initialised: {s}" for s in self.left]


def _read_safetensors(path: str) -> dict[str, np.ndarray]:
    from singa.checkpoint import read_weights  # the reader of load_weights: one set of checks

    return read_weights(path)


def _read_onnx(path: str) -> dict[str, np.ndarray]:
    import onnx
    from onnx import numpy_helper

    try:
        proto = onnx.load(path)
    except Exception as e:  # protobuf decode errors
        raise ValueError(f"not a readable ONNX file ({type(e).__name__}: {e})") from None
    return {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}


def _read_checkpoint(path: str) -> dict[str, np.ndarray]:
    from singa import checkpoint

    names = set(checkpoint.read(path).names)
    return {k: v for k, v in checkpoint.read_arrays(path).items() if k in names}


def read_weights(path: str) -> dict[str, np.ndarray]:
    """The named arrays of a checkpoint zip, ONNX or safetensors file (told apart by
    their content: a zip, an ONNX protobuf, or a safetensors header)."""
    if zipfile.is_zipfile(path):
        return _read_checkpoint(path)
    if str(path).lower().endswith(".onnx"):
        return _read_onnx(path)
    with open(path, "rb") as f:
        head = f.read(9)
    if len(head) == 9 and head[8:9] == b"{":
        return _read_safetensors(path)
    return _read_onnx(path)


def load_matching(model: Any, path: str) -> InitReport:
    """Copy into ``model`` (compiled: its states exist) the arrays of ``path`` whose name
    and shape match its states (cast to the state's dtype); nothing else changes."""
    given = read_weights(path)
    own = model.get_states()
    report = InitReport(path)
    values = {}
    for name, t in own.items():
        arr = given.get(name)
        if arr is None:
            report.left.append(f"{name} {tuple(t.shape)} (not in the file)")
        elif tuple(arr.shape) != tuple(t.shape):
            report.left.append(f"{name} {tuple(t.shape)} (the file's is {tuple(arr.shape)})")
        elif arr.dtype.kind != "f" and np.dtype(t.dtype).kind == "f":
            report.left.append(f"{name} (the file's is {arr.dtype})")
        else:
            values[name] = np.ascontiguousarray(arr, dtype=t.dtype)
            report.loaded.append(name)
    report.unused = [k for k in given if k not in values]
    if not values:
        names = ", ".join(list(given)[:6]) + (", ..." if len(given) > 6 else "")
        raise ValueError(
            f"none of its {len(given)} arrays matches a state of the model by name and shape "
            f"(the file has: {names or 'nothing'})"
        )
    model.set_states(values, strict=False)
    return report
