"""ONNX graphs of whole models stored without their weights, so that the whole-model
checks also run where torch or torchvision do not import.

``strip`` empties every large floating-point initializer of an exported model and writes
the statistics of its values (mean, standard deviation, minimum, maximum) into the
initializer's ``doc_string``; small ones and integer ones (shapes, indices, scales) keep
their data. ``fill`` draws new values with those statistics (normal, clipped to the
range: a BatchNorm variance stays positive, a folded convolution keeps its scale), so a
deep network's activations keep the magnitudes they had at export. The files under
``data/torchvision`` are gzip-compressed stripped graphs written by
``python tests/sonnx/whole_models.py --store tests/sonnx/data/torchvision``."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import onnx
from onnx import numpy_helper

#: initializers with at most this many elements keep their values
KEEP_ELEMENTS = 64
MARK = "stripped:"
FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16}
DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "torchvision")


def strip(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` with its large float initializers emptied (their statistics
    kept in ``doc_string``)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for init in out.graph.initializer:
        if init.data_type not in FLOATS or int(np.prod(init.dims)) <= KEEP_ELEMENTS:
            continue
        values = numpy_helper.to_array(init).astype(np.float64)
        stats = {"mean": values.mean(), "std": values.std(), "min": values.min(), "max": values.max()}
        dims, data_type, name = list(init.dims), init.data_type, init.name
        init.Clear()
        init.name, init.data_type = name, data_type
        init.dims.extend(dims)
        init.doc_string = MARK + json.dumps({k: float(v) for k, v in stats.items()})
    return out


def fill(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """A copy of a stripped ``model`` whose emptied initializers hold random values with
    their recorded statistics (the same values for the same seed)."""
    rng = np.random.default_rng(seed)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for init in out.graph.initializer:
        if not init.doc_string.startswith(MARK):
            continue
        stats = json.loads(init.doc_string[len(MARK) :])
        values = rng.normal(stats["mean"], stats["std"], size=tuple(init.dims))
        values = np.clip(values, stats["min"], stats["max"])
        dtype = onnx.helper.tensor_dtype_to_np_dtype(init.data_type)
        init.CopyFrom(numpy_helper.from_array(values.astype(dtype), init.name))
    return out


def save(model: onnx.ModelProto, path: str) -> None:
    """Write a stripped ``model`` gzip-compressed (fixed timestamp: same bytes each time)."""
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        f.write(strip(model).SerializeToString())


def read(name: str) -> onnx.ModelProto:
    """The stored graph ``name`` (``data/torchvision/<name>.onnx.gz``) as stored (stripped)."""
    with gzip.open(os.path.join(DIR, f"{name}.onnx.gz"), "rb") as f:
        return onnx.load_from_string(f.read())


def load(name: str, seed: int = 0) -> onnx.ModelProto:
    """The stored graph ``name`` with its weights filled."""
    return fill(read(name), seed)


def input_shape(model: onnx.ModelProto) -> tuple:
    """The first graph input's shape without its (dynamic) batch axis."""
    return tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim[1:])


def names() -> list[str]:
    """The stored graphs' names, sorted."""
    if not os.path.isdir(DIR):
        return []
    return sorted(f[: -len(".onnx.gz")] for f in os.listdir(DIR) if f.endswith(".onnx.gz"))
