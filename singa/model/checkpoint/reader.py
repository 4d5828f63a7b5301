"""Reading a whole checkpoint: its members, the JSON members validated, the arrays
checked against ``states_attr.json`` and ``metadata.json``, all before any model is
touched."""

from __future__ import annotations

import os
from typing import Any

from singa.model.checkpoint.errors import CheckpointError
from singa.model.checkpoint.hashing import sha256_hex
from singa.model.checkpoint.layout import (
    AUX_STATE,
    EXTRA_STATES,
    METADATA,
    OPTIMIZER_STATE,
    STATES_ATTR,
    TENSOR_DICT,
    ArrayMeta,
    Contents,
)
from singa.model.checkpoint.manifest import attr_meta, check_extra, check_metadata, fail, load_json
from singa.model.checkpoint.zip_read import Npy, open_zip, read_member, read_npz


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


def _read_metadata(zf: Any, members: dict, label: str) -> tuple[dict, int]:
    """``metadata.json`` and the format version (0: an Apache SINGA file, which has none);
    checks that exactly the members of that version are present."""
    names = set(members)
    if METADATA in members:
        meta = load_json(read_member(zf, members[METADATA], label), f"{label}: {METADATA}")
        version = check_metadata(meta, label)
        expected = {TENSOR_DICT, STATES_ATTR, EXTRA_STATES, METADATA}
    else:
        meta, version = {}, 0
        expected = {TENSOR_DICT, STATES_ATTR}
    problems = [f"missing member {n!r}" for n in sorted(expected - names)]
    problems += [f"unexpected member {n!r}" for n in sorted(names - expected)]
    if problems and version == 0 and TENSOR_DICT not in names:
        problems.insert(0, "not a checkpoint (no metadata.json or tensor_dict.npz)")
    fail(label, problems)
    return meta, version


def _read_json_members(zf: Any, members: dict, meta: dict, version: int, label: str) -> tuple[dict, dict]:
    """``states_attr.json`` and ``extra_states.json`` (their digests checked against
    the metadata), validated."""
    attrs_b = read_member(zf, members[STATES_ATTR], label)
    if version >= 1:
        extra_b = read_member(zf, members[EXTRA_STATES], label)
        bad = [
            n
            for n, b in ((STATES_ATTR, attrs_b), (EXTRA_STATES, extra_b))
            if sha256_hex(b) != meta["members"][n]
        ]
        fail(label, [f"checksum mismatch in {n} (corrupt file)" for n in bad])
        extra = load_json(extra_b, f"{label}: {EXTRA_STATES}")
        check_extra(extra, label)
    else:
        extra = {"aux": {}, "optimizer": None, "rng": None, "device": None}
    attrs = load_json(attrs_b, f"{label}: {STATES_ATTR}")
    if not isinstance(attrs, dict):
        raise CheckpointError(f"{label}: {STATES_ATTR} is not a dict")
    return attrs, extra


def _match_arrays(
    npys: dict[str, Npy], attrs: dict, meta: dict, version: int, problems: list[str]
) -> dict[str, ArrayMeta]:
    """The metadata of every stored array, checked against its ``.npy`` header."""
    arrays: dict[str, ArrayMeta] = {}
    problems += [f"array {k!r} has no entry in {STATES_ATTR}" for k in npys if k not in attrs]
    problems += [f"{STATES_ATTR} entry {k!r} has no array in {TENSOR_DICT}" for k in attrs if k not in npys]
    for key, a in npys.items():
        m = attr_meta(key, attrs[key], version, problems) if key in attrs else None
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
    return arrays


def _cross_check(npys: dict, arrays: dict[str, ArrayMeta], meta: dict, extra: dict) -> list[str]:
    """Disagreements between the members of a version-1 file."""
    problems = [f"{METADATA} lists {k!r}, which is not stored" for k in meta["arrays"] if k not in npys]
    clash = sorted(k for k in extra["aux"] if k in arrays and arrays[k].state_type == AUX_STATE)
    problems += [f"aux state {k!r} is stored both as an array and as a JSON value" for k in clash]
    if extra["optimizer"] is None and any(m.state_type == OPTIMIZER_STATE for m in arrays.values()):
        problems.append("optimizer slots are stored without optimizer states")
    return problems


def _digest_mismatches(npys: dict[str, Npy], arrays: dict[str, ArrayMeta]) -> list[str]:
    return [
        f"checksum mismatch for array {k!r} (expected SHA-256 {arrays[k].sha256[:16]}..., "
        f"found {a.sha256[:16]}...; corrupt file)"
        for k, a in npys.items()
        if a.sha256 != arrays[k].sha256
    ]


def _read(f: Any, path: str, label: str, load: bool, limit: int) -> Contents:
    zf, members = open_zip(f, label, limit + (1 << 30))
    meta, version = _read_metadata(zf, members, label)
    attrs, extra = _read_json_members(zf, members, meta, version, label)
    npys = read_npz(f, zf, members[TENSOR_DICT], label, limit, load, check_crc=version == 0)
    problems: list[str] = []
    arrays = _match_arrays(npys, attrs, meta, version, problems)
    if version >= 1:
        problems += _cross_check(npys, arrays, meta, extra)
    fail(label, problems)
    if load and version >= 1:
        fail(label, _digest_mismatches(npys, arrays))
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
