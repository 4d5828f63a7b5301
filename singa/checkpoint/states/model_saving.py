"""Saving: collecting a layer's states, an optimizer's states, the device's random
state and the aux states into checkpoint entries, with checks that everything will
load back unchanged, then writing them."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

import numpy as np

from singa import device as _device
from singa.checkpoint.errors import CheckpointError
from singa.checkpoint.fileformat.file_writing import write_checkpoint
from singa.checkpoint.fileformat.layout import (
    AUX_STATE,
    MODEL_STATE,
    OPTIMIZER_PREFIX,
    OPTIMIZER_STATE,
    ArrayEntry,
    check_dtype,
    safe_name,
)
from singa.checkpoint.states import lazy_params
from singa.opt.dist import unwrap_optimizer
from singa.tensor import Tensor

_MAX_JSON_DEPTH = 100


def host(x: Any, what: str) -> np.ndarray:
    """A host numpy view (or, from a GPU, copy) of a Tensor's or array's data."""
    if isinstance(x, Tensor):
        x = x.data
    if not isinstance(x, np.ndarray):
        if hasattr(x, "get") and hasattr(x, "shape") and hasattr(x, "dtype"):
            x = x.get()
        else:
            raise TypeError(f"{what}: expected a Tensor or an array, got {type(x).__name__}")
    if not (x.flags.c_contiguous or x.flags.f_contiguous):
        x = np.ascontiguousarray(x)
    try:
        check_dtype(x.dtype, what)
    except CheckpointError as e:
        raise TypeError(str(e)) from None
    return x


def is_array(v: Any) -> bool:
    """True for a numpy or cupy array."""
    return isinstance(v, np.ndarray) or (
        type(v).__module__.startswith("cupy") and hasattr(v, "get") and hasattr(v, "dtype")
    )


def check_json(v: Any, where: str, depth: int = 0) -> None:
    """Raise TypeError unless ``v`` is made of JSON values that load back unchanged."""
    if depth > _MAX_JSON_DEPTH:
        raise TypeError(f"{where}: nested more than {_MAX_JSON_DEPTH} levels")
    if v is None or type(v) in (bool, int, str):
        return
    if type(v) is float:
        return
    if type(v) is list:
        for i, x in enumerate(v):
            check_json(x, f"{where}[{i}]", depth + 1)
        return
    if type(v) is dict:
        for k, x in v.items():
            if type(k) is not str:
                raise TypeError(f"{where}: dict key {k!r} is not a string (JSON would turn it into one)")
            check_json(x, f"{where}[{k!r}]", depth + 1)
        return
    hint = " (it would come back as a list; pass a list)" if isinstance(v, tuple) else ""
    if isinstance(v, Tensor) or is_array(v):
        hint = " (Tensors and arrays are allowed only as top-level values of aux_states)"
    raise TypeError(f"{where}: {type(v).__name__} is not a JSON value{hint}")


def to_json(v: Any) -> Any:
    """Optimizer states as plain JSON (numpy scalars to Python numbers, tuples to lists)."""
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, list | tuple):
        return [to_json(x) for x in v]
    if isinstance(v, Mapping):
        return {str(k): to_json(x) for k, x in v.items()}
    return v


def check_key(key: Any, what: str) -> None:
    """Raise unless ``key`` is a string that can name a zip member."""
    if not isinstance(key, str):
        raise TypeError(f"{what} names must be strings, got {key!r}")
    if not _safe_name_seen(key):
        raise ValueError(
            f"{what} name {key!r} cannot be stored: empty, absolute, or with '..', '.', '\\\\' or empty parts"
        )


@functools.lru_cache(maxsize=1 << 14)
def _safe_name_seen(key: str) -> bool:
    """``safe_name(key)``, remembered: a model saves the same few hundred names on every
    save, and checking them again was a tenth of an asynchronous save's blocking time."""
    return safe_name(key)


def states_device(layer: Any, params: Mapping | None = None) -> Any:
    """The device of a layer's (or of the given) parameters; the default device if none."""
    tensors = list(params.values()) if params is not None else []
    if layer is not None:
        tensors = list(layer.get_params().values()) or list(layer.get_states().values())
    return tensors[0].device if tensors else _device.get_default_device()


def _model_entries(states: Mapping, pending: Any) -> list[ArrayEntry]:
    """The layer's ``states``, plus the entries a pending load still holds for states
    that are not created yet (they are kept)."""
    entries = []
    for name, t in states.items():
        check_key(name, "state")
        entries.append(ArrayEntry(name, MODEL_STATE, host(t, f"state {name!r}")))
    if pending is not None:
        for name, arr in pending.entries.items():
            if name not in states:
                entries.append(ArrayEntry(name, MODEL_STATE, arr))
    return entries


def _optimizer_entries(
    optimizer: Any, layer: Any, params: Mapping | None, pending: Any
) -> tuple[list[ArrayEntry], dict]:
    """The optimizer's slots as entries, and its other states as JSON (held ones when
    a pending load has not applied them yet)."""
    names = params if params is not None else layer.get_params()
    if pending is not None and pending.optimizer_states is not None:
        st = dict(pending.optimizer_states)
    else:
        st = dict(optimizer.get_states(names))
    entries = []
    slots = st.pop("slots", None) or {}
    for slot, arr in slots.items():
        check_key(slot, "optimizer slot")
        entries.append(
            ArrayEntry(OPTIMIZER_PREFIX + slot, OPTIMIZER_STATE, host(arr, f"slot {slot!r}"), {"slot": slot})
        )
    opt_json = {"class": type(optimizer).__name__, "states": to_json(st)}
    check_json(opt_json, "optimizer states")
    return entries, opt_json


def _aux_entries(aux_states: Mapping | None) -> tuple[list[ArrayEntry], dict]:
    """Array-valued aux states as entries, the others as JSON."""
    entries, aux_json = [], {}
    for key, v in (aux_states or {}).items():
        if not isinstance(key, str):
            raise TypeError(f"aux_states keys must be strings, got {key!r}")
        what = f"aux_states[{key!r}]"
        if isinstance(v, Tensor) or is_array(v):
            check_key(key, "aux state")
            kind = "tensor" if isinstance(v, Tensor) else "ndarray"
            entries.append(ArrayEntry(key, AUX_STATE, host(v, what), {"aux_type": kind}))
        elif isinstance(v, np.generic) and np.dtype(v.dtype).kind in "biufc":
            check_key(key, "aux state")
            entries.append(ArrayEntry(key, AUX_STATE, np.asarray(v), {"aux_type": "scalar"}))
        else:
            check_json(v, what)
            aux_json[key] = v
    return entries, aux_json


def _check_unique(entries: list[ArrayEntry]) -> None:
    seen: set[str] = set()
    for e in entries:
        if e.key in seen:
            raise ValueError(
                f"two entries would be stored under {e.key!r} (an aux state named like a model state?)"
            )
        seen.add(e.key)


@dataclass
class Snapshot:
    """Everything a checkpoint file will hold, collected and checked: the arrays
    (copies when taken with ``copy=True``), the JSON aux values, the optimizer's JSON
    states, the random state and the device's name. :func:`write_snapshot` writes it."""

    entries: list[ArrayEntry]
    aux_json: dict
    opt_json: dict | None
    rng: dict | None
    device: str


def snapshot(
    layer: Any,
    *,
    optimizer: Any,
    params: Mapping | None,
    aux_states: Mapping | None,
    with_rng: bool,
    copy: bool = False,
) -> Snapshot:
    """Collect and check the states of ``layer`` and ``optimizer`` (over ``params``, or
    the layer's parameters), ``aux_states`` and with ``with_rng`` the device's random
    state. With ``copy=True`` every array is copied, so training may go on changing
    the live arrays while the snapshot is written (asynchronous saving)."""
    optimizer = unwrap_optimizer(optimizer)  # a DistOpt saves the optimizer it wraps
    # the layer is walked once: its parameters are its states that store gradients, in
    # the same order as get_params() (a second walk was half of an asynchronous save's
    # blocking time on ResNet-20)
    states = layer.get_states() if layer is not None else {}
    if params is None and layer is not None:
        params = {n: t for n, t in states.items() if t.stores_grad} or None
    pending = lazy_params.pending_of(layer) if layer is not None else None
    entries = _model_entries(states, pending) if layer is not None else []
    opt_json = None
    fresh: set[int] = set()  # arrays made for this snapshot: no second copy
    if optimizer is not None:
        opt_entries, opt_json = _optimizer_entries(optimizer, layer, params, pending)
        entries += opt_entries
        if pending is None or pending.optimizer_states is None:  # get_states() returned copies
            fresh = {id(e.array) for e in opt_entries}
    aux_entries, aux_json = _aux_entries(aux_states)
    entries += aux_entries
    _check_unique(entries)
    dev = states_device(None if params else layer, params)
    dev_name = "cpu" if not dev.is_gpu else f"cuda:{dev.id}"
    rng = None
    if with_rng:
        rng = to_json(dev.get_rng_state())
        check_json(rng, "random state")
    if copy:
        copies = _copied([e.array for e in entries], fresh)
        entries = [ArrayEntry(e.key, e.state_type, c, dict(e.extra)) for e, c in zip(entries, copies)]
        aux_json = deepcopy(aux_json)  # the caller's values; opt_json and rng are built fresh
    return Snapshot(entries, aux_json, opt_json, rng, dev_name)


def _copied(arrays: list, fresh: set) -> list:
    """Copies of ``arrays``, those of one dtype as views of one fresh buffer: one
    allocation per dtype instead of one per array (a ResNet-20 has about 170). Arrays
    whose ``id`` is in ``fresh`` (made for this snapshot: the optimizer's slot copies)
    are kept as they are."""
    out: list = [a if id(a) in fresh else None for a in arrays]
    by_dtype: dict = {}
    for i, a in enumerate(arrays):
        if out[i] is None:
            by_dtype.setdefault(a.dtype, []).append(i)
    for dtype, idx in by_dtype.items():
        buf = np.empty(sum(arrays[i].size for i in idx), dtype)
        at = 0
        for i in idx:
            a = arrays[i]
            view = buf[at : at + a.size].reshape(a.shape)
            np.copyto(view, a)
            out[i] = view
            at += a.size
    return out


def write_snapshot(fpath: Any, snap: Snapshot, *, compress: bool = False) -> str:
    """Write a :class:`Snapshot` to ``fpath`` atomically; returns the path written."""
    return write_checkpoint(
        fpath,
        snap.entries,
        aux_values=snap.aux_json,
        optimizer=snap.opt_json,
        rng=snap.rng,
        device=snap.device,
        compress=compress,
    )


def save(
    fpath: Any,
    *,
    layer: Any,
    optimizer: Any,
    params: Mapping | None,
    aux_states: Mapping | None,
    with_rng: bool,
    compress: bool,
) -> str:
    """Save the states of ``layer`` and ``optimizer`` (over ``params``, or the layer's
    parameters), ``aux_states`` and with ``with_rng`` the device's random state to
    ``fpath``; everything is checked before the file is written."""
    snap = snapshot(layer, optimizer=optimizer, params=params, aux_states=aux_states, with_rng=with_rng)
    return write_snapshot(fpath, snap, compress=compress)
