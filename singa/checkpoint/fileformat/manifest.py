"""The JSON members of a checkpoint (``states_attr.json``, ``extra_states.json``,
``metadata.json``): building them when saving and validating them, on their own,
when reading."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import numpy as np

from singa.checkpoint.errors import CheckpointError
from singa.checkpoint.fileformat.layout import (
    AUX_STATE,
    AUX_TYPES,
    EXTRA_KEYS,
    EXTRA_STATES,
    FORMAT,
    FORMAT_VERSION,
    METADATA,
    MODEL_STATE,
    OPTIMIZER_PREFIX,
    OPTIMIZER_STATE,
    SINGA_DTYPES,
    STATES_ATTR,
    ArrayEntry,
    ArrayMeta,
    check_dtype,
)

_HEX = frozenset("0123456789abcdef")


# ----- building ------------------------------------------------------------------------------------
def states_attr_json(entries: list[ArrayEntry]) -> bytes:
    """``states_attr.json``: state type, shape, dtype and extra attributes per entry."""
    attrs: dict[str, dict] = {}
    for e in entries:
        check_dtype(e.array.dtype, f"checkpoint entry {e.key!r}")
        attrs[e.key] = {
            "state_type": e.state_type,
            "shape": [int(s) for s in e.array.shape],
            "dtype": e.array.dtype.name,
            **e.extra,
        }
    return json.dumps(attrs, allow_nan=False).encode("utf-8")


def extra_states_json(
    aux_values: dict, optimizer: dict | None, rng: dict | None, device: str | None
) -> bytes:
    """``extra_states.json``: the JSON aux values, optimizer scalars, random state, device."""
    return json.dumps({"aux": aux_values, "optimizer": optimizer, "rng": rng, "device": device}).encode()


def metadata_json(
    created: str, compress: bool, device: str | None, arrays: dict[str, str], members: dict[str, str]
) -> bytes:
    """``metadata.json``: format, versions, creation time and the SHA-256 of every
    array (``arrays``) and JSON member (``members``)."""
    from singa import __version__

    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "singa_version": __version__,
        "created": created,
        "compression": "deflated" if compress else "stored",
        "device": device,
        "arrays": arrays,
        "members": members,
    }
    return json.dumps(meta, indent=1).encode("utf-8")


# ----- validating ----------------------------------------------------------------------------------
def fail(label: str, problems: Iterable[str]) -> None:
    """Raise one CheckpointError listing ``problems``, if there are any."""
    problems = list(problems)
    if problems:
        raise CheckpointError(f"{label}: " + "; ".join(problems))


def load_json(data: bytes, what: str) -> Any:
    """Parse a JSON member, raising CheckpointError naming ``what``."""
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{what} is not valid JSON ({type(e).__name__}: {str(e)[:200]})") from None


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_hex(v: Any) -> bool:
    return isinstance(v, str) and len(v) == 64 and set(v) <= _HEX


def check_metadata(meta: Any, label: str) -> int:
    """Validate ``metadata.json``; returns its format version."""
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
    fail(label, problems)
    return version


def check_extra(extra: Any, label: str) -> None:
    """Validate ``extra_states.json``."""
    what = EXTRA_STATES
    if not isinstance(extra, dict) or set(extra) != set(EXTRA_KEYS):
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
    fail(label, problems)


def _attr_dtype(dt: Any, version: int, where: str, problems: list[str]) -> tuple[bool, np.dtype | None]:
    """(ok, dtype) of a ``states_attr.json`` dtype: a numpy name, or in a version-0
    (Apache SINGA) file its DataType enum (None when unknown: the header decides)."""
    if version == 0 and _is_int(dt):
        return True, np.dtype(SINGA_DTYPES[dt]) if dt in SINGA_DTYPES else None
    if isinstance(dt, str):
        try:
            return True, check_dtype(dt, where)
        except (TypeError, CheckpointError):
            problems.append(f"{where}: unsupported dtype {dt!r}")
            return False, None
    if version >= 1:
        problems.append(f"{where}: dtype {dt!r} is not a string")
        return False, None
    return True, None


def _attr_kind(meta: ArrayMeta, attr: dict, version: int, where: str, problems: list[str]) -> None:
    """Fill in the aux type or the optimizer slot of an entry."""
    st, key = meta.state_type, meta.key
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


def attr_meta(key: str, attr: Any, version: int, problems: list[str]) -> ArrayMeta | None:
    """The :class:`ArrayMeta` of a ``states_attr.json`` entry, or None (with the
    reasons appended to ``problems``)."""
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
    ok, dtype = _attr_dtype(attr.get("dtype"), version, where, problems)
    if not ok:
        return None
    meta = ArrayMeta(key, st, tuple(shape), dtype, None)  # type: ignore[arg-type]
    _attr_kind(meta, attr, version, where, problems)
    return meta
