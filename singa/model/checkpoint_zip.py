"""Writing primitives of :mod:`singa.model.checkpoint` (private; the layout is
documented in ``docs/checkpoint-format.md``): the zip writer, ``.npy`` headers, the
SHA-256 hashing lanes and the atomic file replacement.

Arrays go into ``tensor_dict.npz`` (a zip of ``.npy`` members, itself a STORED
member of the outer zip) straight from their memory, without intermediate copies.
Every member's CRC-32 is computed once (the outer member's CRC is combined from its
pieces with :func:`crc32_combine`) and the SHA-256 digests run on worker threads
while the main thread writes. The file is written to a temporary name next to the
target, flushed (in the background while writing, then fsync'ed) and renamed over it.
"""

from __future__ import annotations

import ast
import hashlib
import math
import os
import socket
import stat
import struct
import threading
import time
import zipfile
import zlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["CheckpointError"]

CHUNK = 16 << 20  # bytes per read/hash step of a large array
HASH_INLINE = 1 << 20  # arrays below this are hashed on the calling thread
HASH_LANES = 2  # worker threads hashing different arrays at once (at most the CPU count)
SYNC_EVERY = 32 << 20  # bytes written between background flushes of a save
MAX_JSON_BYTES = 64 << 20
MAX_NDIM = 64
_U32 = 0xFFFFFFFF
_DEFLATE_MAX_RATIO = 1032  # deflate cannot expand more than this (RFC 1951 maximum)
_ALLOWED_KINDS = "biufc"


class CheckpointError(ValueError):
    """A checkpoint cannot be used: the file is not a checkpoint, is corrupt or
    truncated, was written by a newer format, or does not match the model,
    optimizer or random generator it is loaded into. The message names the file and
    every offending entry."""


# ----- CRC-32 combination (zlib's crc32_combine, which Python does not expose) -------
_POLY = 0xEDB88320


def _multmodp(a: int, b: int) -> int:
    m, p = 1 << 31, 0
    while True:
        if a & m:
            p ^= b
            if (a & (m - 1)) == 0:
                return p
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1


_X2N = [1 << 30]
for _ in range(31):
    _X2N.append(_multmodp(_X2N[-1], _X2N[-1]))


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC-32 of A + B from crc32(A), crc32(B) and len(B)."""
    p, k, n = 1 << 31, 3, len2
    while n:
        if n & 1:
            p = _multmodp(_X2N[k & 31], p)
        n >>= 1
        k += 1
    return _multmodp(p, crc1) ^ crc2


# ----- .npy headers -------------------------------------------------------------------------
def check_dtype(dtype: Any, what: str) -> np.dtype:
    """The dtype if a checkpoint may hold it (bool, ints, floats, complex), else raise."""
    dt = np.dtype(dtype)
    if dt.kind not in _ALLOWED_KINDS or dt.fields is not None or dt.subdtype is not None:
        raise CheckpointError(f"{what}: dtype {dt} cannot be stored (only bool, int, uint, float, complex)")
    return dt


def npy_header(dtype: np.dtype, shape: tuple, fortran: bool) -> bytes:
    """A .npy (version 1.0, or 2.0 for huge headers) header, padded like numpy's to 64 bytes."""
    descr = np.lib.format.dtype_to_descr(dtype)
    shape = tuple(int(s) for s in shape)
    d = f"{{'descr': {descr!r}, 'fortran_order': {fortran!r}, 'shape': {shape!r}, }}"
    for version, prefix in (((1, 0), 10), ((2, 0), 12)):
        hlen = len(d) + 1
        pad = (-(prefix + hlen)) % 64
        body = (d + " " * pad + "\n").encode("latin1")
        if version == (1, 0) and len(body) < 0x10000:
            return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(body)) + body
    return b"\x93NUMPY\x02\x00" + struct.pack("<I", len(body)) + body


def parse_npy_header(read: Callable[[int], bytes], what: str) -> tuple[np.dtype, tuple, bool, int]:
    """Parse a .npy header from ``read(n)``: (dtype, shape, fortran_order, header length)."""
    pre = read(8)
    if len(pre) != 8 or pre[:6] != b"\x93NUMPY":
        raise CheckpointError(f"{what}: not a .npy array")
    major = pre[6]
    if major == 1:
        raw, n = read(2), 2
    elif major in (2, 3):
        raw, n = read(4), 4
    else:
        raise CheckpointError(f"{what}: unsupported .npy version {major}.{pre[7]}")
    if len(raw) != n:
        raise CheckpointError(f"{what}: truncated .npy header")
    hlen = int.from_bytes(raw, "little")
    if hlen > 0x10000:
        raise CheckpointError(f"{what}: .npy header of {hlen} bytes is too long")
    text = read(hlen)
    if len(text) != hlen:
        raise CheckpointError(f"{what}: truncated .npy header")
    try:
        d = ast.literal_eval(text.decode("utf8" if major == 3 else "latin1"))
    except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError, RecursionError) as e:
        raise CheckpointError(f"{what}: unreadable .npy header ({type(e).__name__})") from None
    if not isinstance(d, dict) or set(d) != {"descr", "fortran_order", "shape"}:
        raise CheckpointError(f"{what}: malformed .npy header {text[:200]!r}")
    descr, fortran, shape = d["descr"], d["fortran_order"], d["shape"]
    if not isinstance(descr, str):
        raise CheckpointError(f"{what}: structured or object dtype {descr!r} is not allowed")
    try:
        dtype = np.dtype(descr)
    except (TypeError, ValueError):
        raise CheckpointError(f"{what}: unknown dtype {descr!r}") from None
    if dtype.hasobject:
        raise CheckpointError(f"{what}: object arrays are not allowed (they need pickle)")
    check_dtype(dtype, what)
    if (
        not isinstance(fortran, bool)
        or not isinstance(shape, tuple)
        or len(shape) > MAX_NDIM
        or not all(type(s) is int and s >= 0 for s in shape)
    ):
        raise CheckpointError(f"{what}: malformed .npy header {text[:200]!r}")
    return dtype, shape, fortran, 6 + 2 + n + hlen


def nbytes_of(dtype: np.dtype, shape: tuple) -> int:
    return math.prod(shape) * dtype.itemsize


def byte_view(arr: np.ndarray) -> memoryview:
    """The bytes of a C- or Fortran-contiguous array in memory order, without copying."""
    a = arr.T if (arr.flags.f_contiguous and not arr.flags.c_contiguous) else arr
    if not a.flags.c_contiguous:
        raise ValueError("byte_view: the array is not contiguous")
    return memoryview(a.reshape(-1).view(np.uint8))


# ----- writing ----------------------------------------------------------------------------------
_LOCAL = struct.Struct("<4s2B4HL2L2H")
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")
_END = struct.Struct("<4s4H2LH")
_END64 = struct.Struct("<4sQ2H2L4Q")
_LOC64 = struct.Struct("<4sLQL")


def _dos_time(t: float) -> tuple[int, int]:
    lt = time.localtime(t)
    year = min(max(lt.tm_year, 1980), 2107)
    return (lt.tm_hour << 11) | (lt.tm_min << 5) | (lt.tm_sec // 2), ((year - 1980) << 9) | (
        lt.tm_mon << 5
    ) | lt.tm_mday


class Out:
    """Sequential writer on a raw file that tracks the position and, while ``crc``
    is not None, the CRC-32 of everything written. Every ``SYNC_EVERY`` bytes it
    starts an ``fdatasync`` on a background thread, so the disk works while the next
    arrays are hashed and written and the final fsync has little left to do."""

    def __init__(self, f: Any, sync_every: int = 0):
        self.f = f
        self.pos = 0
        self.crc: int | None = None
        self._sync_every = sync_every
        self._since = 0
        self._pool: ThreadPoolExecutor | None = None
        self._sync: Future | None = None

    def write(self, data: Any, crc: int | None = None) -> None:
        mv = memoryview(data)
        n = mv.nbytes
        if self.crc is not None:
            self.crc = zlib.crc32(mv, self.crc) if crc is None else crc32_combine(self.crc, crc, n)
        mv = mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv
        while mv:
            k = self.f.write(mv)
            if not k:
                raise OSError("write returned no progress")
            mv = mv[k:]
        self.pos += n
        self._since += n
        if self._sync_every and self._since >= self._sync_every and (self._sync is None or self._sync.done()):
            self._since = 0
            if self._sync is not None:
                self._sync.result()  # raise a failed flush now
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="singa-ckpt-sync")
            self._sync = self._pool.submit(_fdatasync, self.f.fileno())

    def patch(self, pos: int, data: bytes) -> None:
        self.f.seek(pos)
        self.f.write(data)
        self.f.seek(self.pos)

    def close(self, check: bool = True) -> None:
        """Wait for the background flush; with ``check``, raise its error."""
        sync, pool = self._sync, self._pool
        self._sync = self._pool = None
        try:
            if sync is not None and check:
                sync.result()
        finally:
            if pool is not None:
                pool.shutdown(wait=True)


_fdatasync = getattr(os, "fdatasync", os.fsync)


@dataclass
class _Entry:
    name: bytes
    flags: int
    method: int
    crc: int
    csize: int
    usize: int
    offset: int


class ZipWriter:
    """Writes a zip archive sequentially from the current position of ``out``; offsets
    are relative to that start, so an archive can be written inside a STORED member."""

    def __init__(self, out: Out, mtime: float):
        self.out = out
        self.base = out.pos
        self.time, self.date = _dos_time(mtime)
        self.entries: list[_Entry] = []

    def _local(self, e: _Entry, zip64: bool) -> bytes:
        if zip64:
            extra = struct.pack("<HHQQ", 1, 16, e.usize, e.csize)
            cs = us = _U32
        else:
            extra, cs, us = b"", e.csize, e.usize
        version = 45 if zip64 else 20
        head = _LOCAL.pack(
            b"PK\x03\x04",
            version,
            0,
            e.flags,
            e.method,
            self.time,
            self.date,
            e.crc,
            cs,
            us,
            len(e.name),
            len(extra),
        )
        return head + e.name + extra

    def _entry(self, name: str, method: int) -> _Entry:
        try:
            raw, flags = name.encode("ascii"), 0
        except UnicodeEncodeError:
            raw, flags = name.encode("utf-8"), 0x800
        return _Entry(raw, flags, method, 0, 0, 0, self.out.pos - self.base)

    def add(self, name: str, pieces: list, crcs: list[int], usize: int, method: int = 0) -> None:
        """Add a member whose (possibly compressed) content is ``pieces`` with the
        given CRC-32 of each piece; ``usize`` is the uncompressed size and the member's
        CRC-32 is that of the uncompressed data (``crcs`` then are for that data too
        when ``method`` is STORED; for DEFLATED pass ``crcs=[crc of uncompressed]`` and
        the pieces are hashed as they are written)."""
        e = self._entry(name, method)
        csize = sum(memoryview(p).nbytes for p in pieces)
        if method == zipfile.ZIP_STORED:
            crc = 0
            for p, c in zip(pieces, crcs):
                crc = crc32_combine(crc, c, memoryview(p).nbytes)
        else:
            (crc,) = crcs
        e.crc, e.csize, e.usize = crc, csize, usize
        self.out.write(self._local(e, max(csize, usize) >= _U32))
        for i, p in enumerate(pieces):
            self.out.write(p, crcs[i] if method == zipfile.ZIP_STORED else None)
        self.entries.append(e)

    def add_bytes(self, name: str, data: bytes, compress: bool = False) -> None:
        """Add a small in-memory member."""
        crc = zlib.crc32(data)
        if compress:
            co = zlib.compressobj(6, zlib.DEFLATED, -15)
            self.add(name, [co.compress(data) + co.flush()], [crc], len(data), zipfile.ZIP_DEFLATED)
        else:
            self.add(name, [data], [crc], len(data))

    def begin_stored(self, name: str, zip64: bool) -> tuple[_Entry, int, bool]:
        """Start a STORED member whose content is written next; finish it with
        :meth:`end_stored`."""
        e = self._entry(name, zipfile.ZIP_STORED)
        pos = self.out.pos
        self.out.write(self._local(e, zip64))
        return e, pos, zip64

    def end_stored(self, handle: tuple[_Entry, int, bool], crc: int) -> None:
        e, pos, zip64 = handle
        start = pos + len(self._local(e, zip64))
        e.crc = crc
        e.csize = e.usize = self.out.pos - start
        if e.csize >= _U32 and not zip64:
            raise OSError("checkpoint member grew past 4 GiB without zip64")
        self.out.patch(pos, self._local(e, zip64))
        self.entries.append(e)

    def finish(self) -> None:
        """Write the central directory and the end records."""
        cd_start = self.out.pos - self.base
        for e in self.entries:
            fields = [v for v in (e.usize, e.csize, e.offset) if v >= _U32]
            extra = struct.pack("<HH", 1, 8 * len(fields)) + struct.pack(f"<{len(fields)}Q", *fields)
            extra = extra if fields else b""
            version = 45 if fields else 20
            self.out.write(
                _CENTRAL.pack(
                    b"PK\x01\x02",
                    version,
                    3,
                    version,
                    0,
                    e.flags,
                    e.method,
                    self.time,
                    self.date,
                    e.crc,
                    min(e.csize, _U32),
                    min(e.usize, _U32),
                    len(e.name),
                    len(extra),
                    0,
                    0,
                    0,
                    (0o100644 << 16),
                    min(e.offset, _U32),
                )
                + e.name
                + extra
            )
        cd_size = self.out.pos - self.base - cd_start
        n = len(self.entries)
        if n >= 0xFFFF or cd_start >= _U32 or cd_size >= _U32:
            z64 = self.out.pos - self.base
            self.out.write(_END64.pack(b"PK\x06\x06", 44, 45, 45, 0, 0, n, n, cd_size, cd_start))
            self.out.write(_LOC64.pack(b"PK\x06\x07", 0, z64, 1))
        n16 = min(n, 0xFFFF)
        self.out.write(_END.pack(b"PK\x05\x06", 0, 0, n16, n16, min(cd_size, _U32), min(cd_start, _U32), 0))


class Hasher:
    """SHA-256 digests computed on worker threads, so hashing overlaps with reading
    or writing. Each array goes to one "lane" (a single-thread executor, so its
    chunks are hashed in order); different arrays are hashed in parallel on up to
    ``HASH_LANES`` lanes. Small inputs are hashed inline."""

    def __init__(self) -> None:
        self._lanes: list[ThreadPoolExecutor] = []
        self._next = 0

    def lane(self) -> Callable[..., Future]:
        """The ``submit`` of the next lane (round robin)."""
        n = max(1, min(HASH_LANES, os.cpu_count() or 1))
        if len(self._lanes) < n:
            self._lanes.append(ThreadPoolExecutor(1, thread_name_prefix="singa-ckpt-hash"))
        pool = self._lanes[self._next % len(self._lanes)]
        self._next += 1
        return pool.submit

    def digest(self, parts: list, nbytes: int) -> Future | str:
        """The hex SHA-256 of the concatenated ``parts`` (or a Future of it)."""

        def run() -> str:
            h = hashlib.sha256()
            for p in parts:
                h.update(p)
            return h.hexdigest()

        return run() if nbytes < HASH_INLINE else self.lane()(run)

    def close(self) -> None:
        for pool in self._lanes:
            pool.shutdown(wait=True)
        self._lanes = []


def resolve(v: Future | str) -> str:
    return v.result() if isinstance(v, Future) else v


def write_npy_member(
    zw: ZipWriter, key: str, arr: np.ndarray, hasher: Hasher, compress: bool
) -> Future | str:
    """Add ``key + '.npy'`` holding ``arr`` (C- or F-contiguous); returns the member's
    SHA-256 (maybe as a Future)."""
    fortran = bool(arr.flags.f_contiguous and not arr.flags.c_contiguous and arr.ndim > 1)
    header = npy_header(arr.dtype, arr.shape, fortran)
    data = byte_view(arr)
    sha = hasher.digest([header, data], data.nbytes)
    crc_h, crc_d = zlib.crc32(header), zlib.crc32(data)
    usize = len(header) + data.nbytes
    if not compress:
        zw.add(key + ".npy", [header, data], [crc_h, crc_d], usize)
    else:
        co = zlib.compressobj(6, zlib.DEFLATED, -15)
        parts = [co.compress(header)]
        for i in range(0, data.nbytes, CHUNK):
            parts.append(co.compress(data[i : i + CHUNK]))
        parts.append(co.flush())
        zw.add(key + ".npy", parts, [crc32_combine(crc_h, crc_d, data.nbytes)], usize, zipfile.ZIP_DEFLATED)
    return sha


# ----- atomic replacement -------------------------------------------------------------------
_TMP_TAG = ".singa-tmp."
_active_tmp: set[str] = set()
_active_lock = threading.Lock()


def _host_tag() -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in socket.gethostname())[:64] or "host"


def _tmp_prefix(base: str) -> str:
    if len(base) > 120:
        base = base[:80] + "~" + hashlib.sha1(base.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return "." + base + _TMP_TAG


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def remove_stale_temporaries(folder: str, base: str) -> list[str]:
    """Remove temporary files left next to ``base`` by saves of this host whose
    process no longer exists (killed mid-save). Returns the removed paths."""
    if os.name != "posix":
        return []
    prefix, host, removed = _tmp_prefix(base), _host_tag(), []
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return []
    for name in names:
        if not name.startswith(prefix):
            continue
        parts = name[len(prefix) :].rsplit(".", 2)
        if len(parts) != 3 or parts[0] != host or not parts[1].isdigit():
            continue
        path = os.path.join(folder, name)
        pid = int(parts[1])
        with _active_lock:
            busy = path in _active_tmp
        if busy or (pid != os.getpid() and _pid_alive(pid)):
            continue
        try:
            os.unlink(path)
            removed.append(path)
        except OSError:
            pass
    return removed


def atomic_write(fpath: Any, write: Callable[[Any], None]) -> str:
    """Call ``write(raw_file)`` on a new temporary file next to ``fpath``, fsync it,
    and rename it over ``fpath`` (a symlink's target is replaced, not the link); then
    fsync the folder. A crash at any moment leaves the old file or the new one.
    Returns the path written."""
    target = os.path.realpath(os.fspath(fpath))
    if os.path.isdir(target):
        raise IsADirectoryError(f"cannot save a checkpoint to {fpath!r}: it is a directory")
    folder, base = os.path.split(target)
    remove_stale_temporaries(folder, base)
    tmp = os.path.join(folder, f"{_tmp_prefix(base)}{_host_tag()}.{os.getpid()}.{os.urandom(6).hex()}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    with _active_lock:
        _active_tmp.add(tmp)
    try:
        fd = os.open(tmp, flags, 0o666)
        try:
            with open(fd, "wb", buffering=0, closefd=True) as f:
                write(f)
                os.fsync(f.fileno())
            try:
                os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
            except OSError:
                pass
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    finally:
        with _active_lock:
            _active_tmp.discard(tmp)
    if os.name == "posix":
        try:
            dfd = os.open(folder or ".", os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass
    return target
