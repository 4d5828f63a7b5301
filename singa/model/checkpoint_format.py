"""The checkpoint layout (private part of :mod:`singa.model.checkpoint`): which
members a checkpoint zip holds, what their JSON says, and the validation of a
file's contents on their own, before any model is touched.

See ``docs/checkpoint-format.md`` for the layout.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import time
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from singa.model.checkpoint_io import (
    CheckpointError,
    atomic_write,
    check_dtype,
    open_zip,
    read_member,
    read_npz,
    write_npz,
    zipinfo,
)

FORMAT = "singa-checkpoint"
FORMAT_VERSION = 1
TENSOR_DICT = "tensor_dict.npz"
STATES_ATTR = "states_attr.json"
EXTRA_STATES = "extra_states.json"
METADATA = "metadata.json"
MODEL_STATE, AUX_STATE, OPTIMIZER_STATE = 0, 1, 2  # states_attr.json "state_type"
AUX_TYPES = ("tensor", "ndarray", "scalar")
OPTIMIZER_PREFIX = "optimizer/"
# dtypes of Apache SINGA's states_attr.json (its core DataType enum)
_SINGA_DTYPES = {0: "float32", 1: "float16", 2: "int32", 4: "float64"}
_HEX = frozenset("0123456789abcdef")


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


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_checkpoint(
    fpath: Any,
    entries: list[ArrayEntry],
    aux_values: dict,
    optimizer: dict | None,
    rng: dict | None,
    device: str | None,
    compress: bool = False,
) -> str:
    """Write a checkpoint atomically (see :func:`atomic_write`); returns the path."""
    created = datetime.datetime.now(datetime.timezone.utc)
    attrs: dict[str, dict] = {}
    for e in entries:
        check_dtype(e.array.dtype, f"checkpoint entry {e.key!r}")
        attrs[e.key] = {
            "state_type": e.state_type,
            "shape": [int(s) for s in e.array.shape],
            "dtype": e.array.dtype.name,
            **e.extra,
        }
    attrs_b = json.dumps(attrs, allow_nan=False).encode("utf-8")
    extra_b = json.dumps({"aux": aux_values, "optimizer": optimizer, "rng": rng, "device": device}).encode()
    from singa import __version__

    when = time.localtime(created.timestamp())[:6]

    def write(f: Any) -> None:
        with zipfile.ZipFile(f, "w") as zf:
            shas = write_npz(f, zf, TENSOR_DICT, when, [(e.key, e.array) for e in entries], compress)
            zf.writestr(zipinfo(STATES_ATTR, when, compress), attrs_b)
            zf.writestr(zipinfo(EXTRA_STATES, when, compress), extra_b)
            meta = {
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "singa_version": __version__,
                "created": created.isoformat(timespec="seconds"),
                "compression": "deflated" if compress else "stored",
                "device": device,
                "arrays": shas,
                "members": {STATES_ATTR: _sha(attrs_b), EXTRA_STATES: _sha(extra_b)},
            }
            zf.writestr(zipinfo(METADATA, when, False), json.dumps(meta, indent=1).encode("utf-8"))

    return atomic_write(fpath, write)


# ----- reading ------------------------------------------------------------------------------------
def default_max_bytes() -> int:
    """The largest total array size a checkpoint may declare: the machine's memory."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def read_checkpoint(fpath: Any, load: bool = True, max_bytes: int | None = None) -> Contents:
    """Read and validate a checkpoint: structure, JSON, .npy headers, and with
    ``load`` every array with its SHA-256 (or, for Apache SINGA files, its CRC-32).
    Raises :class:`CheckpointError` naming the file for anything wrong."""
    path = os.fspath(fpath)
    label = repr(path)
    limit = default_max_bytes() if max_bytes is None else max_bytes
    with open(path, "rb") as f:
        try:
            return _read(f, path, label, load, limit)
        except CheckpointError:
            raise
        except Exception as e:  # zipfile, zlib and numpy raise a variety of errors on corrupt input
            raise CheckpointError(f"{label} is not a readable checkpoint ({type(e).__name__}: {e})") from e


def _fail(label: str, problems: Iterable[str]) -> None:
    problems = list(problems)
    if problems:
        raise CheckpointError(f"{label}: " + "; ".join(problems))


def load_json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{what} is not valid JSON ({type(e).__name__}: {str(e)[:200]})") from None


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_hex(v: Any) -> bool:
    return isinstance(v, str) and len(v) == 64 and set(v) <= _HEX


def _check_metadata(meta: Any, label: str) -> int:
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{label}: {METADATA} does not describe a {FORMAT} file")
    version = meta.get("format_version")
    if not _is_int(version) or version < 1:
        raise CheckpointError(f"{label}: invalid format_version {version!r} in {METADATA}")
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"{label} has format version {version}, written by a newer singa "
            f"({meta.get('singa_version')!r}); this singa reads versions up to {FORMAT_VERSION}"
        )
    problems = []
    for k in ("singa_version", "created", "compression"):
        if not isinstance(meta.get(k), str):
            problems.append(f"{METADATA}: {k!r} missing or not a string")
    arrays, members = meta.get("arrays"), meta.get("members")
    if not isinstance(arrays, dict) or not all(_is_hex(v) for v in arrays.values()):
        problems.append(f"{METADATA}: 'arrays' must map keys to SHA-256 hex digests")
    if not isinstance(members, dict) or not all(_is_hex(members.get(m)) for m in (STATES_ATTR, EXTRA_STATES)):
        problems.append(f"{METADATA}: 'members' must hold the SHA-256 of {STATES_ATTR} and {EXTRA_STATES}")
    _fail(label, problems)
    return version


def _check_extra(extra: Any, label: str) -> None:
    what = EXTRA_STATES
    if not isinstance(extra, dict) or set(extra) != {"aux", "optimizer", "rng", "device"}:
        raise CheckpointError(f"{label}: {what} must hold exactly 'aux', 'optimizer', 'rng' and 'device'")
    problems = []
    if not isinstance(extra["aux"], dict):
        problems.append(f"{what}: 'aux' is not a dict")
    opt = extra["optimizer"]
    if opt is not None and not (
        isinstance(opt, dict) and isinstance(opt.get("class"), str) and isinstance(opt.get("states"), dict)
    ):
        problems.append(f"{what}: 'optimizer' must be null or hold 'class' (a string) and 'states' (a dict)")
    if extra["rng"] is not None and not isinstance(extra["rng"], dict):
        problems.append(f"{what}: 'rng' must be null or a dict")
    if extra["device"] is not None and not isinstance(extra["device"], str):
        problems.append(f"{what}: 'device' must be null or a string")
    _fail(label, problems)


def _attr_meta(key: str, attr: Any, version: int, problems: list[str]) -> ArrayMeta | None:
    where = f"{STATES_ATTR}[{key!r}]"
    if not isinstance(attr, dict):
        problems.append(f"{where} is not a dict")
        return None
    st = attr.get("state_type")
    allowed = (MODEL_STATE, AUX_STATE) if version == 0 else (MODEL_STATE, AUX_STATE, OPTIMIZER_STATE)
    shape = attr.get("shape")
    if not _is_int(st) or st not in allowed:
        problems.append(f"{where}: unknown state_type {st!r}")
        return None
    if not isinstance(shape, list) or not all(_is_int(s) and s >= 0 for s in shape):
        problems.append(f"{where}: shape {shape!r} is not a list of sizes")
        return None
    dt = attr.get("dtype")
    dtype = None
    if version == 0 and _is_int(dt):
        dtype = np.dtype(_SINGA_DTYPES[dt]) if dt in _SINGA_DTYPES else None
    elif isinstance(dt, str):
        try:
            dtype = check_dtype(dt, where)
        except (TypeError, CheckpointError):
            problems.append(f"{where}: unsupported dtype {dt!r}")
            return None
    elif version >= 1:
        problems.append(f"{where}: dtype {dt!r} is not a string")
        return None
    meta = ArrayMeta(key, st, tuple(shape), dtype, None)  # type: ignore[arg-type]
    if version >= 1 and st == AUX_STATE:
        meta.aux_type = attr.get("aux_type")
        if meta.aux_type not in AUX_TYPES:
            problems.append(f"{where}: aux_type {meta.aux_type!r} is not one of {AUX_TYPES}")
    elif version == 0 and st == AUX_STATE:
        meta.aux_type = "tensor"
    if st == OPTIMIZER_STATE:
        meta.slot = attr.get("slot")
        if not isinstance(meta.slot, str) or key != OPTIMIZER_PREFIX + meta.slot:
            problems.append(f"{where}: slot {meta.slot!r} does not match the key")
    return meta


def _read(f: Any, path: str, label: str, load: bool, limit: int) -> Contents:
    zf, members = open_zip(f, label, limit + (1 << 30))
    names = set(members)
    if METADATA in members:
        meta = load_json(read_member(zf, members[METADATA], label), f"{label}: {METADATA}")
        version = _check_metadata(meta, label)
        expected = {TENSOR_DICT, STATES_ATTR, EXTRA_STATES, METADATA}
    else:
        meta, version = {}, 0
        expected = {TENSOR_DICT, STATES_ATTR}
    problems = [f"missing member {n!r}" for n in sorted(expected - names)]
    problems += [f"unexpected member {n!r}" for n in sorted(names - expected)]
    if problems and version == 0 and TENSOR_DICT not in names:
        problems.insert(0, "not a checkpoint (no metadata.json or tensor_dict.npz)")
    _fail(label, problems)

    attrs_b = read_member(zf, members[STATES_ATTR], label)
    if version >= 1:
        extra_b = read_member(zf, members[EXTRA_STATES], label)
        bad = [
            n for n, b in ((STATES_ATTR, attrs_b), (EXTRA_STATES, extra_b)) if _sha(b) != meta["members"][n]
        ]
        _fail(label, [f"checksum mismatch in {n} (corrupt file)" for n in bad])
        extra = load_json(extra_b, f"{label}: {EXTRA_STATES}")
        _check_extra(extra, label)
    else:
        extra = {"aux": {}, "optimizer": None, "rng": None, "device": None}
    attrs = load_json(attrs_b, f"{label}: {STATES_ATTR}")
    if not isinstance(attrs, dict):
        raise CheckpointError(f"{label}: {STATES_ATTR} is not a dict")

    npys = read_npz(f, zf, members[TENSOR_DICT], label, limit, load, check_crc=version == 0)

    arrays: dict[str, ArrayMeta] = {}
    problems = [f"array {k!r} has no entry in {STATES_ATTR}" for k in npys if k not in attrs]
    problems += [f"{STATES_ATTR} entry {k!r} has no array in {TENSOR_DICT}" for k in attrs if k not in npys]
    for key, a in npys.items():
        if key not in attrs:
            continue
        m = _attr_meta(key, attrs[key], version, problems)
        if m is None:
            continue
        if m.shape != a.shape or (m.dtype is not None and m.dtype.name != a.dtype.name):
            problems.append(
                f"array {key!r}: {STATES_ATTR} says {m.shape} {m.dtype}, "
                f"the array is {a.shape} {a.dtype.name}"
            )
        m.shape, m.dtype = a.shape, a.dtype.newbyteorder("=")
        if version >= 1:
            m.sha256 = meta["arrays"].get(key)
            if m.sha256 is None:
                problems.append(f"array {key!r} has no SHA-256 in {METADATA}")
        arrays[key] = m
    if version >= 1:
        problems += [f"{METADATA} lists {k!r}, which is not stored" for k in meta["arrays"] if k not in npys]
        clash = sorted(k for k in extra["aux"] if k in arrays and arrays[k].state_type == AUX_STATE)
        problems += [f"aux state {k!r} is stored both as an array and as a JSON value" for k in clash]
        if extra["optimizer"] is None and any(m.state_type == OPTIMIZER_STATE for m in arrays.values()):
            problems.append("optimizer slots are stored without optimizer states")
    _fail(label, problems)

    if load and version >= 1:
        _fail(
            label,
            [
                f"checksum mismatch for array {k!r} (expected SHA-256 {arrays[k].sha256[:16]}..., "
                f"found {a.sha256[:16]}...; corrupt file)"
                for k, a in npys.items()
                if a.sha256 != arrays[k].sha256
            ],
        )
    return Contents(
        path=path,
        format_version=version,
        metadata=meta,
        arrays=arrays,
        values={k: a.array for k, a in npys.items()} if load else {},
        aux_values=extra["aux"],
        optimizer=extra["optimizer"],
        rng=extra["rng"],
        device=extra["device"],
    )
