"""The end record of a zip, read before :mod:`zipfile` parses the central directory:
it must close the file exactly (else the file is truncated, or something was
appended), and the number of members and the size of the central directory it
declares must be plausible, so that a hostile file cannot make the reader parse
100,000 members or a huge central directory."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any

from singa.checkpoint.errors import CheckpointError

_EOCD = b"PK\x05\x06"
_EOCD64 = b"PK\x06\x06"
_EOCD64_LOCATOR = b"PK\x06\x07"
_LOCAL_HEADER = b"PK\x03\x04"
_EOCD_SIZE, _LOCATOR_SIZE, _EOCD64_SIZE = 22, 20, 56
_MAX_COMMENT = 0xFFFF
#: bytes one central directory entry may take: fixed part, a name of up to 4096 bytes, extra fields
MAX_ENTRY_BYTES = 46 + 4096 + 1024


@dataclass(frozen=True)
class EndRecord:
    """What a zip's end record declares."""

    members: int
    directory_bytes: int


def _missing_end(head: bytes, label: str) -> CheckpointError:
    if head.startswith(_LOCAL_HEADER):
        return CheckpointError(
            f"{label} is truncated or incomplete: it begins like a zip file but its end record is missing "
            "(the file was cut short, or is still being written)"
        )
    return CheckpointError(f"{label} is not a valid zip file (no zip end record)")


def _zip64_members(f: Any, locator_at: int, label: str) -> tuple[int, int]:
    """Members and central directory size from the ZIP64 end record."""
    f.seek(locator_at)
    loc = f.read(_LOCATOR_SIZE)
    if len(loc) != _LOCATOR_SIZE or loc[:4] != _EOCD64_LOCATOR:
        raise CheckpointError(f"{label}: the ZIP64 end record locator is missing (truncated or damaged file)")
    (offset,) = struct.unpack("<Q", loc[8:16])
    if offset > locator_at - _EOCD64_SIZE:
        raise CheckpointError(f"{label}: the ZIP64 end record lies outside the file (damaged file)")
    f.seek(offset)
    rec = f.read(_EOCD64_SIZE)
    if len(rec) != _EOCD64_SIZE or rec[:4] != _EOCD64:
        raise CheckpointError(f"{label}: the ZIP64 end record is damaged")
    members, size = struct.unpack("<QQ", rec[32:48])
    return members, size


def end_record(f: Any, label: str) -> EndRecord:
    """Read the end record of the zip in the seekable file ``f``; raise CheckpointError
    unless it ends the file exactly."""
    size = f.seek(0, os.SEEK_END)
    tail = min(size, _EOCD_SIZE + _MAX_COMMENT)
    f.seek(0)
    head = f.read(4)
    f.seek(size - tail)
    data = f.read(tail)
    at = data.rfind(_EOCD)
    if at < 0 or len(data) - at < _EOCD_SIZE:
        raise _missing_end(head, label)
    _, _, _, members, dir_bytes, _, comment = struct.unpack("<4H2LH", data[at + 4 : at + _EOCD_SIZE])
    if at + _EOCD_SIZE + comment != len(data):
        if head.startswith(_LOCAL_HEADER):
            raise CheckpointError(
                f"{label} is truncated or incomplete: its zip end record is not at the end of the file "
                "(the file was cut short, or data was appended)"
            )
        raise CheckpointError(f"{label} is not a valid zip file (no zip end record at its end)")
    if members == 0xFFFF or dir_bytes == 0xFFFFFFFF:
        members, dir_bytes = _zip64_members(f, size - tail + at - _LOCATOR_SIZE, label)
    return EndRecord(members, dir_bytes)


def check_end_record(f: Any, label: str, max_members: int | None) -> EndRecord:
    """The end record of ``f``, refused when it declares more than ``max_members``
    members (None: no limit) or a central directory too large for its members."""
    end = end_record(f, label)
    if max_members is not None and end.members > max_members:
        raise CheckpointError(
            f"{label}: the zip declares {end.members} members, more than the {max_members} expected"
        )
    if end.directory_bytes > end.members * MAX_ENTRY_BYTES + 1024:
        raise CheckpointError(
            f"{label}: a central directory of {end.directory_bytes} bytes for {end.members} members "
            "(lying central directory?)"
        )
    return end
