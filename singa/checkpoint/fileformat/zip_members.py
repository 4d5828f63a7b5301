"""Reading a checkpoint's zip with bounds: every member's name, flags, declared sizes
and offsets are checked before anything is read (zip bombs, overlapping members,
truncation), each ``.npy`` header is parsed with numpy (never pickle) and the data is
read into a new array, which a worker thread hashes while the next one is read."""

from __future__ import annotations

import io
import math
import os
import stat
import struct
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib import format as npy

from singa.checkpoint.errors import CheckpointError
from singa.checkpoint.fileformat.end_records import EndRecord, check_end_record
from singa.checkpoint.fileformat.hashing import CHUNK, HASH_WORKERS, hash_member, memory_bytes, resolved
from singa.checkpoint.fileformat.layout import MAX_JSON_BYTES, MAX_NDIM, check_dtype, safe_name

_DEFLATE_MAX_RATIO = 1032  # deflate cannot expand more than this (RFC 1951)
_HEADER_READERS = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}


class _Slice:
    """Bytes ``[start, start + size)`` of the open file ``f`` as a read-only file: a
    STORED ``tensor_dict.npz`` is opened in place through it (zipfile's own file for a
    member re-reads the member from its start on every backward seek)."""

    def __init__(self, f: Any, start: int, size: int):
        self._f, self._start, self._size, self._pos = f, start, size, 0

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = 0) -> int:
        self._pos = max(0, pos + (0, self._pos, self._size)[whence])
        return self._pos

    def read(self, n: int = -1) -> bytes:
        left = max(0, self._size - self._pos)
        self._f.seek(self._start + self._pos)
        data = self._f.read(left if n < 0 else min(n, left))
        self._pos += len(data)
        return data

    def readinto(self, b: Any) -> int:
        mv = memoryview(b).cast("B")
        self._f.seek(self._start + self._pos)
        got = self._f.readinto(mv[: max(0, min(mv.nbytes, self._size - self._pos))])
        self._pos += got
        return got


def _data_start(f: Any, info: zipfile.ZipInfo, label: str) -> int:
    """Where a member's data begins in ``f``: after its local header, whose name must
    be the central directory's."""
    f.seek(info.header_offset)
    head = f.read(zipfile.sizeFileHeader)
    if len(head) != zipfile.sizeFileHeader or head[:4] != zipfile.stringFileHeader:
        raise CheckpointError(f"{label}: member {info.filename!r} has no valid local header (truncated?)")
    name_len, extra_len = struct.unpack("<2H", head[26:30])
    expect = info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437", "replace")
    if f.read(name_len) != expect:
        raise CheckpointError(f"{label}: member {info.filename!r}: local and central names differ")
    return info.header_offset + len(head) + name_len + extra_len


def open_regular(path: str, label: str) -> Any:
    """Open ``path`` for reading if it is a regular file; a directory, FIFO, device or
    socket is refused before anything is read, and the open never blocks."""
    kind = _file_kind(os.stat(path).st_mode)
    if kind is None:
        flags = (
            os.O_RDONLY
            | getattr(os, "O_NONBLOCK", 0)
            | getattr(os, "O_CLOEXEC", 0)
            | getattr(os, "O_BINARY", 0)
        )
        fd = os.open(path, flags)
        kind = _file_kind(os.fstat(fd).st_mode)  # it may have been replaced since the stat
        if kind is None:
            return os.fdopen(fd, "rb")
        os.close(fd)
    raise CheckpointError(f"{label} is not a regular file (it is a {kind}); a checkpoint is a zip file")


def _file_kind(mode: int) -> str | None:
    """None for a regular file, else what it is."""
    if stat.S_ISREG(mode):
        return None
    kinds = ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"))
    kinds += ((stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"))
    return next((name for test, name in kinds if test(mode)), "special file")


def _check_member(f: Any, info: zipfile.ZipInfo, label: str, data_end: int) -> int:
    """Check one member's name, flags and declared sizes; returns where its data ends."""
    name = info.filename
    if not safe_name(name):
        raise CheckpointError(f"{label}: rejected member name {name!r} (absolute or path traversal)")
    if info.flag_bits & 0x1:
        raise CheckpointError(f"{label}: member {name!r} is encrypted")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise CheckpointError(f"{label}: member {name!r} uses unsupported compression {info.compress_type}")
    end = _data_start(f, info, label) + info.compress_size
    if end > data_end:
        raise CheckpointError(
            f"{label}: member {name!r} declares {info.compress_size} bytes past the end of the data "
            "(truncated?)"
        )
    if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
        raise CheckpointError(f"{label}: stored member {name!r} has inconsistent sizes")
    if info.file_size > info.compress_size * _DEFLATE_MAX_RATIO + 1024:
        raise CheckpointError(
            f"{label}: member {name!r} declares {info.file_size} bytes from {info.compress_size} "
            "compressed bytes, more than deflate can produce (zip bomb?)"
        )
    return end


def _check_directory(zf: zipfile.ZipFile, end: EndRecord, label: str) -> None:
    """The central directory must hold what the end record declares, and the first
    member must start the file (else the file was cut inside, or is not a zip)."""
    infos = zf.infolist()
    if len(infos) != end.members:
        raise CheckpointError(
            f"{label}: the central directory holds {len(infos)} members, its end record declares "
            f"{end.members} (lying central directory?)"
        )
    if infos and min(i.header_offset for i in infos) != 0:
        raise CheckpointError(
            f"{label} is truncated or incomplete: the zip found in it does not start at its beginning "
            "(the file was cut short, or is not a checkpoint)"
        )


def open_zip(
    f: Any, label: str, max_bytes: int, max_members: int | None = None
) -> tuple[zipfile.ZipFile, dict[str, zipfile.ZipInfo]]:
    """Open the zip in the seekable file ``f`` and check every member before anything
    is read: an end record that closes the file and declares at most ``max_members``
    members, safe and unique names, no encryption, stored or deflated, sizes that fit
    in the file, that deflate can produce and that stay under ``max_bytes`` in all,
    no overlaps (zip bombs)."""
    end = check_end_record(f, label, max_members)
    try:
        zf = zipfile.ZipFile(f)
    except zipfile.BadZipFile as e:
        raise CheckpointError(f"{label} is not a valid zip file ({e})") from None
    _check_directory(zf, end, label)
    data_end = min(zf.start_dir, f.seek(0, os.SEEK_END))
    members: dict[str, zipfile.ZipInfo] = {}
    spans, total = [], 0
    for info in zf.infolist():
        if info.filename in members:
            raise CheckpointError(f"{label}: duplicate member {info.filename!r}")
        spans.append((info.header_offset, _check_member(f, info, label, data_end), info.filename))
        total += info.file_size
        if total > max_bytes:
            raise CheckpointError(
                f"{label}: members declare {total} bytes in all, more than the limit of {max_bytes} "
                "(zip bomb?)"
            )
        members[info.filename] = info
    spans.sort()
    for (_, end1, n1), (start2, _, n2) in zip(spans, spans[1:]):
        if start2 < end1:
            raise CheckpointError(f"{label}: members {n1!r} and {n2!r} overlap (zip bomb?)")
    return zf, members


def read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, label: str, limit: int = MAX_JSON_BYTES) -> bytes:
    """The content of a member (zipfile checks its CRC-32), at most ``limit`` bytes."""
    if info.file_size > limit:
        raise CheckpointError(
            f"{label}: member {info.filename!r} is {info.file_size} bytes, over the {limit} limit"
        )
    try:
        return zf.read(info)
    except (zipfile.BadZipFile, EOFError, zlib.error, OSError) as e:
        raise CheckpointError(f"{label}: member {info.filename!r} is corrupt ({e})") from None


@dataclass
class Npy:
    """A ``.npy`` member of tensor_dict.npz: its checked header and, when read, its
    array (in native byte order) and the SHA-256 of the member."""

    dtype: np.dtype
    shape: tuple
    array: np.ndarray | None = None
    sha256: Any = None  # str, or a Future of it while being computed


def _read_npy(
    f: Any,
    zf: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    what: str,
    pool: ThreadPoolExecutor | None,
    check_crc: bool,
) -> Npy:
    """Parse and check the header of a ``.npy`` member of ``zf`` (the zip in ``f``); with
    a ``pool``, read its data too and hash it on the pool. Unless ``check_crc``, STORED
    data is read from ``f`` straight into the array, skipping zipfile's CRC-32 pass
    (the SHA-256 checks the same bytes)."""
    with zf.open(info) as ef:
        version = npy.read_magic(ef)
        if version not in _HEADER_READERS:
            raise CheckpointError(f"{what}: unsupported .npy version {version}")
        shape, fortran, dtype = _HEADER_READERS[version](ef)
        hlen = ef.tell()
        ef.seek(0)
        header = ef.read(hlen)
        if dtype.hasobject:
            raise CheckpointError(f"{what}: object arrays are not allowed (they need pickle)")
        if dtype.fields is not None or dtype.subdtype is not None:
            raise CheckpointError(f"{what}: structured or object dtype {dtype} is not allowed")
        check_dtype(dtype, what)
        if len(shape) > MAX_NDIM or not all(s >= 0 for s in shape):
            raise CheckpointError(f"{what}: malformed .npy header {header[:200]!r}")
        nbytes = math.prod(shape) * dtype.itemsize
        if hlen + nbytes != info.file_size:
            raise CheckpointError(
                f"{what}: header says {shape} {dtype} ({nbytes} bytes) but the member "
                f"holds {info.file_size - hlen} bytes of data"
            )
        if pool is None:
            return Npy(dtype, shape)
        arr = np.empty(shape, dtype, order="F" if fortran else "C")
        data = memory_bytes(arr)
        if not check_crc and info.compress_type == zipfile.ZIP_STORED:
            f.seek(_data_start(f, info, what) + hlen)
            got = f.readinto(data)
        else:  # zipfile checks the CRC-32 when the last byte is read
            got = sum(ef.readinto(data[i : i + CHUNK]) for i in range(0, nbytes, CHUNK))
        if got != nbytes:
            raise CheckpointError(f"{what}: data ends after {got} of {nbytes} bytes (truncated file)")
    sha = hash_member(pool, header, data)  # of the bytes as stored, before any byte swap
    return Npy(dtype, shape, arr if dtype.isnative else arr.astype(dtype.newbyteorder("=")), sha)


class NpzReader:
    """``tensor_dict.npz`` (the member ``info`` of ``zf``, in the file ``f``) opened for
    reading: in place when STORED, else inflated in memory (within ``max_bytes``). Its
    members are checked at once (at most ``max_members``, only ``.npy``, no compressed
    member inside a compressed npz); :meth:`headers` parses the ``.npy`` headers and
    :meth:`arrays` reads the data, so the caller can check the headers first."""

    def __init__(
        self, f: Any, zf: zipfile.ZipFile, info: zipfile.ZipInfo, label: str, max_bytes: int, max_members: int
    ):
        if info.compress_type == zipfile.ZIP_STORED:
            inner: Any = _Slice(f, _data_start(f, info, label), info.file_size)
        else:
            inner = io.BytesIO(read_member(zf, info, label, max_bytes))
        self.label = f"{label}: {info.filename}"
        self._inner = inner
        self._npz, self._members = open_zip(inner, self.label, max_bytes, max_members)
        for name, m in self._members.items():
            if not name.endswith(".npy") or name == ".npy":
                raise CheckpointError(f"{self.label}: member {name!r} is not a .npy array")
            if info.compress_type != zipfile.ZIP_STORED and m.compress_type != zipfile.ZIP_STORED:
                raise CheckpointError(
                    f"{self.label}: member {name!r} is compressed inside a compressed npz "
                    "(nested compression is not part of the format: zip bomb?)"
                )

    def headers(self) -> dict[str, Npy]:
        """The checked ``.npy`` header of every array, by key (no array data is read)."""
        return self._read(None, check_crc=False)

    def arrays(self, check_crc: bool) -> dict[str, Npy]:
        """Every array with its data and SHA-256 (see :func:`_read_npy` for ``check_crc``)."""
        with ThreadPoolExecutor(HASH_WORKERS, "singa-ckpt-hash") as pool:
            arrays = self._read(pool, check_crc)
            for a in arrays.values():
                a.sha256 = resolved(a.sha256)
        return arrays

    def _read(self, pool: ThreadPoolExecutor | None, check_crc: bool) -> dict[str, Npy]:
        arrays = {}
        for name, m in self._members.items():
            key = name[:-4]
            what = f"{self.label}: array {key!r}"
            try:
                arrays[key] = _read_npy(self._inner, self._npz, m, what, pool, check_crc)
            except CheckpointError:
                raise
            except zipfile.BadZipFile:  # zipfile's CRC-32 check at the end of a member
                raise CheckpointError(
                    f"{self.label}: checksum mismatch for array {key!r} (zip CRC-32)"
                ) from None
            except (ValueError, EOFError, zlib.error) as e:
                raise CheckpointError(
                    f"{self.label}: array {key!r} is not a readable .npy array ({e})"
                ) from None
        return arrays
