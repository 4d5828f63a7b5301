"""Reading a whole checkpoint: its members, the JSON members validated, the arrays
checked against ``states_attr.json`` and ``metadata.json``, all before any model is
touched."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from singa.checkpoint.errors import CheckpointError
from singa.checkpoint.fileformat.hashing import sha256_hex
from singa.checkpoint.fileformat.layout import (
    AUX_STATE,
    EXTRA_STATES,
    MAX_JSON_BYTES,
    METADATA,
    OPTIMIZER_STATE,
    STATES_ATTR,
    TENSOR_DICT,
    ArrayMeta,
    Contents,
)
from singa.checkpoint.fileformat.manifest import attr_meta, check_extra, check_metadata, fail, load_json
from singa.checkpoint.fileformat.zip_members import Npy, NpzReader, open_regular, open_zip, read_member


def default_max_bytes() -> int:
    """The largest total array size a checkpoint may declare: the machine's memory."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 1 << 40


#: arrays a checkpoint may inflate beyond its own size when nothing says what to expect
INFLATE_MARGIN = 64 << 20
INFLATE_RATIO = 64
#: members of a checkpoint zip: four at most (a few more are reported by name)
MAX_MEMBERS = 16
#: bytes of states_attr.json per expected array (names, shapes, dtypes), plus a fixed margin
ATTR_BYTES_PER_ARRAY = 512


@dataclass
class Expectation:
    """What the reader may expect, from the model a checkpoint is loaded into.

    Attributes:
        max_bytes: the most array bytes the file may declare beyond its own size (what
            compressed members may inflate to); None: :func:`default_budget`.
        max_arrays: the most arrays it may hold (None: no limit).
        check: called with the contents (no array values yet) after the structure,
            the JSON members and every ``.npy`` header are checked and before any
            array data is read or hashed; it raises to refuse the file.
    """

    max_bytes: int | None = None
    max_arrays: int | None = None
    check: Callable[[Contents], None] | None = None


def default_budget(file_size: int) -> int:
    """The array bytes a file of ``file_size`` bytes may declare when nothing else is
    known: what it holds, or a bounded amount more when compressed."""
    return min(default_max_bytes(), INFLATE_MARGIN + INFLATE_RATIO * file_size)


def read_checkpoint(
    fpath: Any, *, load: bool = True, max_bytes: int | None = None, expect: Expectation | None = None
) -> Contents:
    """Read and validate a checkpoint: structure, JSON, .npy headers, and with
    ``load`` every array with its SHA-256 (or, for Apache SINGA files, its CRC-32).
    Only regular files are read; the arrays may declare at most ``max_bytes`` in all
    (default: the file's size plus ``expect.max_bytes``, else :func:`default_budget`),
    checked before anything is inflated. Raises :class:`CheckpointError` naming the file for
    anything wrong."""
    path = os.fspath(fpath)
    label = repr(path)
    expect = expect or Expectation()
    with open_regular(path, label) as f:
        size = os.fstat(f.fileno()).st_size
        if max_bytes is not None:
            limit = max_bytes
        elif expect.max_bytes is not None:
            limit = size + expect.max_bytes
        else:
            limit = default_budget(size)
        try:
            return _read(f, path, label, load, limit, expect)
        except CheckpointError:
            raise
        except Exception as e:  # zipfile, zlib and numpy raise a variety of errors on corrupt input
            raise CheckpointError(f"{label} is not a readable checkpoint ({type(e).__name__}: {e})") from e


def _json_limit(max_arrays: int | None) -> int:
    """The largest states_attr.json or metadata.json for ``max_arrays`` arrays."""
    return (
        MAX_JSON_BYTES
        if max_arrays is None
        else min(MAX_JSON_BYTES, 65536 + ATTR_BYTES_PER_ARRAY * max_arrays)
    )


def _read_metadata(zf: Any, members: dict, label: str, max_arrays: int | None) -> tuple[dict, int]:
    """``metadata.json`` and the format version (0: an Apache SINGA file, which has none);
    checks that exactly the members of that version are present, in the forms it allows."""
    names = set(members)
    if METADATA in members:
        meta_b = read_member(zf, members[METADATA], label, _json_limit(max_arrays))
        meta = load_json(meta_b, f"{label}: {METADATA}")
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
    if version >= 1 and members[TENSOR_DICT].compress_type != zipfile.ZIP_STORED:
        raise CheckpointError(
            f"{label}: {TENSOR_DICT} is compressed; format version {version} stores it as is"
        )
    return meta, version


def _read_json_members(
    zf: Any, members: dict, meta: dict, version: int, label: str, max_arrays: int | None
) -> tuple[dict, dict]:
    """``states_attr.json`` and ``extra_states.json`` (their digests checked against
    the metadata), validated; at most ``max_arrays`` entries in ``states_attr.json``."""
    attrs_b = read_member(zf, members[STATES_ATTR], label, _json_limit(max_arrays))
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
    if max_arrays is not None and len(attrs) > max_arrays:
        raise CheckpointError(
            f"{label}: {STATES_ATTR} lists {len(attrs)} arrays, more than the {max_arrays} expected"
        )
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


def _read(f: Any, path: str, label: str, load: bool, limit: int, expect: Expectation) -> Contents:
    zf, members = open_zip(f, label, limit + 3 * MAX_JSON_BYTES, MAX_MEMBERS)
    meta, version = _read_metadata(zf, members, label, expect.max_arrays)
    attrs, extra = _read_json_members(zf, members, meta, version, label, expect.max_arrays)
    npz = NpzReader(f, zf, members[TENSOR_DICT], label, limit, len(attrs))
    npys = npz.headers()
    problems: list[str] = []
    arrays = _match_arrays(npys, attrs, meta, version, problems)
    if version >= 1:
        problems += _cross_check(npys, arrays, meta, extra)
    fail(label, problems)
    contents = Contents(
        path=path,
        format_version=version,
        metadata=meta,
        arrays=arrays,
        values={},
        aux_values=extra["aux"],
        optimizer=extra["optimizer"],
        rng=extra["rng"],
        device=extra["device"],
    )
    if expect.check is not None:
        expect.check(contents)
    if load:
        npys = npz.arrays(check_crc=version == 0)
        if version >= 1:
            fail(label, _digest_mismatches(npys, arrays))
        contents.values = {k: a.array for k, a in npys.items()}
    return contents
