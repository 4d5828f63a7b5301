"""Checks of an ONNX model before it is imported, so that a bad file or graph is
refused at ``prepare`` time with one clear error naming the file and the
initializer or node:

- only regular files are read; a truncated or corrupt file says so (not a raw
  protobuf ``DecodeError``);
- every initializer (and Constant value) holds as much data as its dims declare,
  checked before any array is built; external data is bounded by its file before
  it is read;
- a graph has nodes, every value a node reads is a graph input, an initializer or
  the output of an earlier node, and its nodes form no cycle.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Iterable
from typing import Any

import numpy as np
import onnx
from onnx import external_data_helper, helper, numpy_helper

__all__ = ["InvalidModel", "load", "initializer_arrays", "check_graph"]

#: the typed data fields of a TensorProto, and the element types stored in each
_TYPED_FIELDS = ("float_data", "int32_data", "int64_data", "double_data", "uint64_data")
_COMPLEX = (onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128)


class InvalidModel(ValueError):
    """An ONNX file or graph that cannot be imported: not a regular file, truncated
    or corrupt, an initializer whose data does not match its dims, a value nothing
    defines, a cycle, no nodes. The message names the file and the initializer or
    node."""


def _kind(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    for test, name in (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
    ):
        if test(mode):
            return name
    return "special file"


def _read_regular(path: str, label: str) -> bytes:
    kind = _kind(os.stat(path).st_mode)
    if kind is not None:
        raise InvalidModel(f"{label} is not a regular file (it is a {kind}); an ONNX model is a file")
    flags = (
        os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    )
    with os.fdopen(os.open(path, flags), "rb") as f:
        kind = _kind(os.fstat(f.fileno()).st_mode)
        if kind is not None:
            raise InvalidModel(f"{label} is not a regular file (it is a {kind})")
        return f.read()


def _parse(data: bytes, label: str) -> onnx.ModelProto:
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as e:  # protobuf raises DecodeError, or RuntimeWarning-like errors, on bad bytes
        raise InvalidModel(
            f"{label} is not a readable ONNX model: truncated or corrupt ({type(e).__name__}: {e})"
        ) from None
    if not model.HasField("graph"):
        raise InvalidModel(f"{label} is not an ONNX model (it holds no graph; truncated or not ONNX?)")
    return model


def load(model: Any) -> tuple[onnx.ModelProto, str]:
    """The ModelProto of ``model`` (a ModelProto, a path or bytes) and a label naming
    it in errors. External data of a file is checked against its dims and its file
    before it is read."""
    if isinstance(model, onnx.ModelProto):
        return model, "the ONNX model"
    if isinstance(model, bytes):
        return _parse(model, "the ONNX bytes"), "the ONNX bytes"
    if isinstance(model, str | os.PathLike):
        path = os.fspath(model)
        label = repr(path)
        proto = _parse(_read_regular(path, label), label)
        base = os.path.dirname(os.path.abspath(path))
        for t in _tensors(proto.graph):
            if external_data_helper.uses_external_data(t):
                _check_external(t, base, label)
        if any(external_data_helper.uses_external_data(t) for t in _tensors(proto.graph)):
            external_data_helper.load_external_data_for_model(proto, base)
        return proto, label
    raise TypeError(f"ONNX import: expected a ModelProto, a path or bytes, got {type(model).__name__}")


def _tensors(graph: onnx.GraphProto) -> Iterable[onnx.TensorProto]:
    yield from graph.initializer
    for nd in graph.node:
        for a in nd.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                yield a.t


def _declared(t: onnx.TensorProto) -> tuple[int, int]:
    """(elements, bytes) that a tensor's dims and data type declare."""
    n = math.prod(int(d) for d in t.dims)
    try:
        itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
    except (KeyError, TypeError, ValueError):
        itemsize = 1
    return n, n * itemsize


def _check_external(t: onnx.TensorProto, base: str, label: str) -> None:
    info = external_data_helper.ExternalDataInfo(t)
    where = os.path.normpath(os.path.join(base, info.location))
    if os.path.isabs(info.location) or not where.startswith(base + os.sep):
        raise InvalidModel(
            f"{label}: initializer {t.name!r}: external data {info.location!r} is outside its folder"
        )
    try:
        size = os.stat(where).st_size
    except OSError as e:
        raise InvalidModel(f"{label}: initializer {t.name!r}: cannot read its external data ({e})") from None
    _, nbytes = _declared(t)
    offset = int(info.offset or 0)
    length = int(info.length) if info.length else size - offset
    if length != nbytes or offset + length > size:
        raise InvalidModel(
            f"{label}: initializer {t.name!r} declares {list(t.dims)} ({nbytes} bytes) but its external "
            f"data {info.location!r} holds {max(0, min(length, size - offset))} bytes"
        )


def _data_mismatch(t: onnx.TensorProto) -> str | None:
    """Why a tensor's data does not fill its dims, or None."""
    if t.data_type == onnx.TensorProto.STRING or external_data_helper.uses_external_data(t):
        return None
    n, nbytes = _declared(t)
    if t.raw_data:
        got = len(t.raw_data)
        return None if got == nbytes else f"its raw data holds {got} bytes"
    field = next((f for f in _TYPED_FIELDS if len(getattr(t, f))), None)
    got = len(getattr(t, field)) if field else 0
    if t.data_type in _COMPLEX:
        got //= 2
    return None if got == n else f"its data holds {got} values"


def _to_array(t: onnx.TensorProto, label: str, what: str) -> np.ndarray:
    why = _data_mismatch(t)
    if why is not None:
        n, nbytes = _declared(t)
        raise InvalidModel(
            f"{label}: {what} declares dims {list(t.dims)} ({n} values, {nbytes} bytes) but {why}"
        )
    try:
        return numpy_helper.to_array(t)
    except Exception as e:  # numpy and onnx raise a variety of errors on malformed tensors
        raise InvalidModel(f"{label}: {what} cannot be read ({type(e).__name__}: {e})") from None


def initializer_arrays(graph: onnx.GraphProto, label: str) -> dict[str, np.ndarray]:
    """Every initializer as a numpy array, each checked against its dims first."""
    return {t.name: _to_array(t, label, f"initializer {t.name!r}") for t in graph.initializer}


def _node_name(nd: onnx.NodeProto, i: int) -> str:
    return f"{nd.op_type} node {nd.name or (nd.output[0] if nd.output else i)!r}"


def _check_constants(graph: onnx.GraphProto, label: str) -> None:
    for i, nd in enumerate(graph.node):
        for a in nd.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                why = _data_mismatch(a.t)
                if why is not None:
                    raise InvalidModel(
                        f"{label}: {_node_name(nd, i)}: attribute {a.name!r} declares dims "
                        f"{list(a.t.dims)} but {why}"
                    )


def _cycle(graph: onnx.GraphProto, producer: dict[str, int]) -> list[int] | None:
    """The nodes of a cycle (in order), if the nodes form one."""
    deps = [{producer[n] for n in nd.input if n in producer} for nd in graph.node]
    state = [0] * len(deps)  # 0 new, 1 on the path, 2 done
    for start in range(len(deps)):
        path, stack = [], [(start, iter(sorted(deps[start])))]
        if state[start]:
            continue
        state[start] = 1
        path.append(start)
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state[nxt] == 1:  # the path follows inputs back: reverse it to the data's flow
                flow = path[path.index(nxt) :][::-1]
                first = flow.index(min(flow))
                return flow[first:] + flow[:first]
            elif state[nxt] == 0:
                state[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(sorted(deps[nxt]))))
    return None


def check_graph(graph: onnx.GraphProto, initializers: Iterable[str], label: str) -> None:
    """Refuse a graph without nodes, a node reading a value that nothing defines or
    that a later node produces, a cycle, or a graph output that nothing produces."""
    if not graph.node:
        raise InvalidModel(f"{label}: the graph has no nodes")
    _check_constants(graph, label)
    producer: dict[str, int] = {}
    for i, nd in enumerate(graph.node):
        for n in nd.output:
            if n:
                producer.setdefault(n, i)
    cycle = _cycle(graph, producer)
    if cycle is not None:
        names = " -> ".join(_node_name(graph.node[i], i) for i in [*cycle, cycle[0]])
        raise InvalidModel(f"{label}: the graph has a cycle: {names}")
    defined = {v.name for v in graph.input} | set(initializers) | {""}
    for i, nd in enumerate(graph.node):
        for n in nd.input:
            if n in defined:
                continue
            if n in producer:
                later = _node_name(graph.node[producer[n]], producer[n])
                raise InvalidModel(
                    f"{label}: {_node_name(nd, i)} reads {n!r} before {later} produces it "
                    "(the nodes are not in topological order)"
                )
            raise InvalidModel(
                f"{label}: {_node_name(nd, i)} reads {n!r}, which no graph input, initializer or node defines"
            )
        defined.update(nd.output)
    for v in graph.output:
        if v.name not in defined:
            raise InvalidModel(f"{label}: graph output {v.name!r} is not produced by any node")
