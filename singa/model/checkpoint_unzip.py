"""Reading primitives of :mod:`singa.model.checkpoint` (private): zip members are
checked (names, flags, declared sizes, overlaps) and read in memory, never extracted;
STORED arrays are read with ``readinto`` straight into their numpy buffer and hashed
on a worker thread. Every problem raises :class:`CheckpointError`.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import struct
import zipfile
import zlib
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from singa.model.checkpoint_zip import (
    CHUNK,
    HASH_INLINE,
    MAX_JSON_BYTES,
    CheckpointError,
    Hasher,
    byte_view,
    nbytes_of,
    parse_npy_header,
)

_DEFLATE_MAX_RATIO = 1032  # deflate cannot expand more than this (RFC 1951 maximum)


# ----- reading ------------------------------------------------------------------------------------
class Window(io.RawIOBase):
    """A read-only, seekable view of ``size`` bytes of ``f`` starting at ``start``."""

    def __init__(self, f: Any, start: int, size: int):
        super().__init__()
        self.f, self.start, self.size, self.pos = f, start, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        if base + pos < 0:
            raise OSError("negative seek position")
        self.pos = base + pos
        return self.pos

    def readinto(self, b: Any) -> int:
        mv = memoryview(b).cast("B")
        n = max(0, min(mv.nbytes, self.size - self.pos))
        if n == 0:
            return 0
        self.f.seek(self.start + self.pos)
        got = self.f.readinto(mv[:n]) or 0
        self.pos += got
        return got


def read_exact(f: Any, pos: int, n: int) -> bytes:
    f.seek(pos)
    buf = bytearray(n)
    mv, done = memoryview(buf), 0
    while done < n:
        k = f.readinto(mv[done:])
        if not k:
            break
        done += k
    return bytes(buf[:done])


@dataclass
class Member:
    """A validated zip member: where its data lies in the container."""

    info: zipfile.ZipInfo
    data_offset: int  # relative to the container the zip lives in

    @property
    def name(self) -> str:
        return self.info.filename

    @property
    def stored(self) -> bool:
        return self.info.compress_type == zipfile.ZIP_STORED


def safe_name(name: str) -> bool:
    """False for names that could escape a folder if extracted or that are odd."""
    if not name or "\x00" in name or "\\" in name or name.startswith("/") or len(name) > 4096:
        return False
    if len(name) >= 2 and name[1] == ":":
        return False
    return all(part not in ("..", ".", "") for part in name.split("/"))


def open_zip(f: Any, size: int, label: str, max_bytes: int) -> tuple[zipfile.ZipFile, dict[str, Member]]:
    """Open and check a zip held in the seekable raw file ``f`` of ``size`` bytes."""
    try:
        zf = zipfile.ZipFile(f)
    except zipfile.BadZipFile as e:
        raise CheckpointError(f"{label} is not a valid zip file ({e})") from None
    members: dict[str, Member] = {}
    cd_start = getattr(zf, "start_dir", size)
    spans = []
    total = 0
    for info in zf.infolist():
        name = info.filename
        if not safe_name(name):
            raise CheckpointError(f"{label}: rejected member name {name!r} (absolute or path traversal)")
        if name in members:
            raise CheckpointError(f"{label}: duplicate member {name!r}")
        if info.flag_bits & 0x1:
            raise CheckpointError(f"{label}: member {name!r} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise CheckpointError(
                f"{label}: member {name!r} uses unsupported compression {info.compress_type}"
            )
        head = read_exact(f, info.header_offset, 30)
        if len(head) != 30 or head[:4] != b"PK\x03\x04":
            raise CheckpointError(f"{label}: member {name!r} has no valid local header (truncated?)")
        nlen, xlen = struct.unpack("<2H", head[26:30])
        raw = read_exact(f, info.header_offset + 30, nlen)
        expect = info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437", "replace")
        if raw != expect:
            raise CheckpointError(f"{label}: member {name!r}: local and central names differ")
        start = info.header_offset + 30 + nlen + xlen
        end = start + info.compress_size
        if end > cd_start or end > size:
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
        total += info.file_size
        if total > max_bytes:
            raise CheckpointError(
                f"{label}: members declare {total} bytes in all, more than the limit of {max_bytes} "
                "(zip bomb?)"
            )
        spans.append((info.header_offset, end, name))
        members[name] = Member(info, start)
    spans.sort()
    for (_, e1, n1), (s2, _, n2) in zip(spans, spans[1:]):
        if s2 < e1:
            raise CheckpointError(f"{label}: members {n1!r} and {n2!r} overlap (zip bomb?)")
    return zf, members


def read_member(zf: zipfile.ZipFile, m: Member, label: str, limit: int = MAX_JSON_BYTES) -> bytes:
    """The content of a small member, CRC-checked by zipfile."""
    if m.info.file_size > limit:
        raise CheckpointError(
            f"{label}: member {m.name!r} is {m.info.file_size} bytes, over the {limit} limit"
        )
    try:
        return zf.read(m.info)
    except (zipfile.BadZipFile, EOFError, zlib.error, OSError) as e:
        raise CheckpointError(f"{label}: member {m.name!r} is corrupt ({e})") from None


def load_json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{what} is not valid JSON ({type(e).__name__}: {str(e)[:200]})") from None


@dataclass
class NpyMember:
    """An array member of tensor_dict.npz: its header and where its data lies."""

    key: str
    member: Member
    dtype: np.dtype
    shape: tuple
    fortran: bool
    header: bytes  # the .npy header as stored (hashed together with the data)

    @property
    def nbytes(self) -> int:
        return nbytes_of(self.dtype, self.shape)


def scan_npz(zf: zipfile.ZipFile, f: Any, members: dict[str, Member], label: str) -> dict[str, NpyMember]:
    """Parse and check the .npy header of every member of an npz."""
    out: dict[str, NpyMember] = {}
    for name, m in members.items():
        if not name.endswith(".npy") or len(name) == 4:
            raise CheckpointError(f"{label}: member {name!r} is not a .npy array")
        key = name[:-4]
        what = f"{label}: array {key!r}"
        if m.stored:
            pos = m.data_offset
            end = pos + m.info.file_size

            def read(n: int, _f: Any = f, end: int = end) -> bytes:
                nonlocal pos
                n = max(0, min(n, end - pos))
                b = read_exact(_f, pos, n)
                pos += len(b)
                return b

            dtype, shape, fortran, hlen = parse_npy_header(read, what)
            header = read_exact(f, m.data_offset, hlen)
        else:
            with _open_member(zf, m, what) as s:
                dtype, shape, fortran, hlen = parse_npy_header(s.read, what)
            with _open_member(zf, m, what) as s:
                header = s.read(hlen)
        if hlen + nbytes_of(dtype, shape) != m.info.file_size:
            raise CheckpointError(
                f"{what}: header says {shape} {dtype} ({nbytes_of(dtype, shape)} bytes) but the member "
                f"holds {m.info.file_size - hlen} bytes of data"
            )
        out[key] = NpyMember(key, m, dtype, shape, fortran, header)
    return out


def _open_member(zf: zipfile.ZipFile, m: Member, what: str) -> Any:
    try:
        return zf.open(m.info)
    except (zipfile.BadZipFile, OSError, zlib.error, EOFError) as e:
        raise CheckpointError(f"{what}: unreadable member ({e})") from None


def read_array(
    zf: zipfile.ZipFile, f: Any, a: NpyMember, hasher: Hasher, what: str, check_crc: bool
) -> tuple[np.ndarray, Future | str]:
    """Read one array into a new numpy array (native byte order). Returns it with the
    SHA-256 of its member (maybe a Future). With ``check_crc`` the zip CRC-32 is
    verified too (for files that carry no SHA-256)."""
    arr = np.empty(a.shape, a.dtype, order="F" if a.fortran else "C")
    buf = byte_view(arr)
    n = buf.nbytes
    h = hashlib.sha256(a.header)
    crc = zlib.crc32(a.header) if check_crc else 0
    big = n >= HASH_INLINE
    submit = None  # the hashing lane of this array
    if a.member.stored:
        f.seek(a.member.data_offset + len(a.header))
        for lo, hi in iter_chunks(n):
            done = lo
            while done < hi:
                k = f.readinto(buf[done:hi])
                if not k:
                    raise CheckpointError(f"{what}: data ends after {done} of {n} bytes (truncated file)")
                done += k
            seg = buf[lo:hi]
            if big:
                if submit is None:
                    submit = hasher.lane()
                submit(functools.partial(h.update, seg))
            else:
                h.update(seg)
            if check_crc:
                crc = zlib.crc32(seg, crc)
    else:
        with _open_member(zf, a.member, what) as s:
            try:
                if s.read(len(a.header)) != a.header:
                    raise CheckpointError(f"{what}: header changed between reads")
                done = 0
                while done < n:
                    data = s.read(min(CHUNK, n - done))
                    if not data:
                        raise CheckpointError(f"{what}: data ends after {done} of {n} bytes (truncated file)")
                    buf[done : done + len(data)] = data
                    h.update(data)
                    done += len(data)
                if s.read(1):
                    raise CheckpointError(f"{what}: more data than the header declares")
            except (zipfile.BadZipFile, EOFError, zlib.error) as e:
                raise CheckpointError(f"{what}: corrupt compressed data ({e})") from None
    if check_crc and a.member.stored and crc != a.member.info.CRC:
        raise CheckpointError(f"{what}: CRC-32 mismatch (corrupt data)")
    # a lane runs its tasks in order: the digest is taken after every update
    sha: Future | str = submit(h.hexdigest) if submit is not None else h.hexdigest()
    if not arr.dtype.isnative:
        arr = arr.byteswap().view(arr.dtype.newbyteorder("="))
    return arr, sha


def iter_chunks(n: int, size: int = CHUNK) -> Iterator[tuple[int, int]]:
    for i in range(0, n, size):
        yield i, min(i + size, n)
