"""File I/O of :mod:`singa.model.checkpoint` (private): zip and ``.npy`` reading and
writing on top of :mod:`zipfile` and :mod:`numpy.lib.format`, the checks that make
hostile files harmless, and the atomic replacement of the file.

A checkpoint is a zip whose first member, ``tensor_dict.npz``, is itself a zip of
``.npy`` members (``docs/checkpoint-format.md``). Saving writes that inner zip through
the outer member (``ZipFile.open(name, "w")``) straight from the arrays' memory, while
a worker thread computes each member's SHA-256 (hashlib releases the GIL). Loading
first checks every member's name, flags, declared sizes and offsets, then parses each
``.npy`` header with numpy (never pickle) and reads the data into a new array, which a
worker thread hashes while the next one is read.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import socket
import stat
import struct
import threading
import zipfile
import zlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib import format as npy

__all__ = ["CheckpointError"]

MAX_JSON_BYTES = 64 << 20
MAX_NDIM = 64
CHUNK = 8 << 20  # bytes per write: few Python-level steps, still in L3 between the two CRC-32s and the copy
HASH_INLINE = 1 << 20  # smaller arrays are hashed on the calling thread
HASH_WORKERS = max(1, min(2, (os.cpu_count() or 1) - 1))  # the calling thread keeps a core
SYNC_EVERY = 32 << 20  # bytes written between background fdatasyncs of a save
_DEFLATE_MAX_RATIO = 1032  # deflate cannot expand more than this (RFC 1951)
_ALLOWED_KINDS = "biufc"
_HEADER_READERS = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}


class CheckpointError(ValueError):
    """A checkpoint cannot be used: the file is not a checkpoint, is corrupt or
    truncated, was written by a newer format, or does not match the model,
    optimizer or random generator it is loaded into. The message names the file and
    every offending entry."""


def check_dtype(dtype: Any, what: str) -> np.dtype:
    """The dtype if a checkpoint may hold it (bool, ints, floats, complex), else raise."""
    dt = np.dtype(dtype)
    if dt.kind not in _ALLOWED_KINDS or dt.fields is not None or dt.subdtype is not None:
        raise CheckpointError(f"{what}: dtype {dt} cannot be stored (only bool, int, uint, float, complex)")
    return dt


def safe_name(name: str) -> bool:
    """False for names that could escape a folder if extracted, or that are odd."""
    if not name or "\x00" in name or "\\" in name or name.startswith("/") or len(name) > 4096:
        return False
    if len(name) >= 2 and name[1] == ":":
        return False
    return all(part not in ("..", ".", "") for part in name.split("/"))


def _memory_bytes(arr: np.ndarray) -> np.ndarray:
    """The bytes of a C- or Fortran-contiguous array in memory order (a view), i.e. the
    data of its ``.npy`` member."""
    return arr.ravel(order="K").view(np.uint8)


_fdatasync = getattr(os, "fdatasync", os.fsync)


def _sha256(header: bytes, data: np.ndarray) -> str:
    h = hashlib.sha256(header)
    h.update(data)
    return h.hexdigest()


def _submit(pool: ThreadPoolExecutor, fn: Callable, *args: Any) -> Future:
    """``pool.submit(fn, *args)``, or ``fn`` run here when the pool takes no more work
    (at interpreter shutdown, e.g. a save from an ``atexit`` handler)."""
    try:
        return pool.submit(fn, *args)
    except RuntimeError:
        done: Future = Future()
        try:
            done.set_result(fn(*args))
        except Exception as e:
            done.set_exception(e)
        return done


def _hash(pool: ThreadPoolExecutor, header: bytes, data: np.ndarray) -> Future | str:
    return _sha256(header, data) if data.nbytes < HASH_INLINE else _submit(pool, _sha256, header, data)


# ----- writing ---------------------------------------------------------------------------------
def zipinfo(name: str, when: tuple, compress: bool, size: int = 0) -> zipfile.ZipInfo:
    """A member's ZipInfo; ``size`` (an upper bound) lets zipfile choose ZIP64 headers
    up front for a member written through ``ZipFile.open(info, "w")``."""
    info = zipfile.ZipInfo(name, when)
    info.compress_type = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    info.external_attr = 0o644 << 16
    info.file_size = size
    return info


def npy_header(arr: np.ndarray) -> bytes:
    """The header numpy's ``write_array`` writes for ``arr`` (format 1.0, or 2.0 when
    the header does not fit)."""
    buf = io.BytesIO()
    d = npy.header_data_from_array_1_0(arr)
    try:
        npy.write_array_header_1_0(buf, d)
    except ValueError:
        npy.write_array_header_2_0(buf, d)
    return buf.getvalue()


def write_npy(
    npz: zipfile.ZipFile, info: zipfile.ZipInfo, arr: np.ndarray, pool: ThreadPoolExecutor
) -> Future | str:
    """Add ``arr`` (C- or F-contiguous) to ``npz`` as a ``.npy`` member, written from its
    memory; returns the member's SHA-256 (maybe a Future computed on ``pool``)."""
    header, data = npy_header(arr), _memory_bytes(arr)
    info.file_size = len(header) + data.nbytes
    digest = _hash(pool, header, data)
    with npz.open(info, "w") as out:
        out.write(header)
        for i in range(0, data.nbytes, CHUNK):
            out.write(data[i : i + CHUNK])
    return digest


def write_npz(
    f: Any, zf: zipfile.ZipFile, name: str, when: tuple, arrays: list[tuple[str, np.ndarray]], compress: bool
) -> dict[str, str]:
    """Add the STORED member ``name`` to the zip ``zf`` (writing to ``f``): an npz
    holding ``<key>.npy`` for each array (deflated with ``compress``). Returns the
    SHA-256 of each ``.npy`` member. Every ``SYNC_EVERY`` bytes an fdatasync of ``f``
    starts in the background, so the disk works while the next arrays are written
    and the final fsync has little left to do."""
    size = sum(a.nbytes + 2 * len(k) + 1024 for k, a in arrays) + 65536
    digests: dict[str, Future | str] = {}
    synced, syncing = 0, None
    with ThreadPoolExecutor(HASH_WORKERS + 1, "singa-ckpt") as pool:
        with zf.open(zipinfo(name, when, False, size), "w") as member, zipfile.ZipFile(member, "w") as npz:
            for key, arr in arrays:
                digests[key] = write_npy(npz, zipinfo(key + ".npy", when, compress), arr, pool)
                if f.tell() - synced >= SYNC_EVERY and (syncing is None or syncing.done()):
                    synced, syncing = f.tell(), _submit(pool, _fdatasync, f.fileno())
        if syncing is not None:
            syncing.result()  # raise its error, if any
        return {k: d if isinstance(d, str) else d.result() for k, d in digests.items()}


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


_closer: ThreadPoolExecutor | None = None
_closing: Future | None = None  # the close of the file replaced by the last save


def _forget_closer() -> None:
    """In a forked child the parent's worker thread does not exist: start afresh."""
    global _closer, _closing
    _closer, _closing = None, None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_closer)


def _hold_open(path: str) -> int | None:
    """An open descriptor of the regular file about to be replaced (POSIX), or None.
    While it is open the rename does not free the old file's blocks (tens of
    milliseconds for a large file already on disk); :func:`_close_later` frees them
    in the background. The old file has no name once replaced, so nothing is ever
    left behind: a crash closes the descriptor too."""
    if os.name != "posix":
        return None
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        return os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None


def _close_later(fd: int | None) -> None:
    """Close ``fd`` on a worker thread (joined at exit)."""
    global _closer, _closing
    if fd is None:
        return
    with _active_lock:
        if _closer is None:
            _closer = ThreadPoolExecutor(1, "singa-ckpt-close")
        _closing = _submit(_closer, os.close, fd)


def _finish_close() -> None:
    """Wait until the file replaced by the previous save is closed, so that a save
    never needs room for more than the old file and the new one."""
    global _closing
    with _active_lock:
        pending, _closing = _closing, None
    if pending is not None:
        try:
            pending.result()
        except OSError:
            pass


def atomic_write(fpath: Any, write: Callable[[Any], None]) -> str:
    """Call ``write(file)`` on a new temporary file next to ``fpath``, flush and fsync
    it, and rename it over ``fpath`` (a symlink's target is replaced, not the link);
    then fsync the folder. A crash at any moment leaves the old file or the new one.
    The replaced file's blocks are freed in the background (:func:`_hold_open`).
    Returns the path written."""
    target = os.path.realpath(os.fspath(fpath))
    if os.path.isdir(target):
        raise IsADirectoryError(f"cannot save a checkpoint to {fpath!r}: it is a directory")
    folder, base = os.path.split(target)
    _finish_close()
    remove_stale_temporaries(folder, base)
    tmp = os.path.join(folder, f"{_tmp_prefix(base)}{_host_tag()}.{os.getpid()}.{os.urandom(6).hex()}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    with _active_lock:
        _active_tmp.add(tmp)
    try:
        try:
            _write_and_replace(tmp, target, flags, write)
        except OSError as e:
            # name the checkpoint, not the temporary file (the original stays the cause)
            if e.errno is None:
                raise type(e)(f"cannot save a checkpoint to {fpath!r}: {e}") from e
            raise type(e)(e.errno, f"cannot save a checkpoint to {fpath!r}: {e.strerror}") from e
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


def _write_and_replace(tmp: str, target: str, flags: int, write: Callable[[Any], None]) -> None:
    """Write, flush and fsync the new temporary file ``tmp`` and rename it over
    ``target``; on any failure remove ``tmp`` and re-raise."""
    fd = os.open(tmp, flags, 0o666)
    try:
        with open(fd, "wb", closefd=True) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
        except OSError:
            pass
        old_fd = _hold_open(target)
        try:
            os.replace(tmp, target)
        finally:
            _close_later(old_fd)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# ----- reading ------------------------------------------------------------------------------------
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


def open_zip(f: Any, label: str, max_bytes: int) -> tuple[zipfile.ZipFile, dict[str, zipfile.ZipInfo]]:
    """Open the zip in the seekable file ``f`` and check every member before anything
    is read: safe and unique names, no encryption, stored or deflated, sizes that fit
    in the file, that deflate can produce and that stay under ``max_bytes`` in all,
    no overlaps (zip bombs)."""
    try:
        zf = zipfile.ZipFile(f)
    except zipfile.BadZipFile as e:
        raise CheckpointError(f"{label} is not a valid zip file ({e})") from None
    data_end = min(zf.start_dir, f.seek(0, os.SEEK_END))
    members: dict[str, zipfile.ZipInfo] = {}
    spans, total = [], 0
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
        total += info.file_size
        if total > max_bytes:
            raise CheckpointError(
                f"{label}: members declare {total} bytes in all, more than the limit of {max_bytes} "
                "(zip bomb?)"
            )
        spans.append((info.header_offset, end, name))
        members[name] = info
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
        data = _memory_bytes(arr)
        if not check_crc and info.compress_type == zipfile.ZIP_STORED:
            f.seek(_data_start(f, info, what) + hlen)
            got = f.readinto(data)
        else:  # zipfile checks the CRC-32 when the last byte is read
            got = sum(ef.readinto(data[i : i + CHUNK]) for i in range(0, nbytes, CHUNK))
        if got != nbytes:
            raise CheckpointError(f"{what}: data ends after {got} of {nbytes} bytes (truncated file)")
    sha = _hash(pool, header, data)  # of the bytes as stored, before any byte swap
    return Npy(dtype, shape, arr if dtype.isnative else arr.astype(dtype.newbyteorder("=")), sha)


def read_npz(
    f: Any,
    zf: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    label: str,
    max_bytes: int,
    load: bool,
    check_crc: bool,
) -> dict[str, Npy]:
    """The arrays of the npz member ``info`` of ``zf`` (opened in place when STORED) by
    key, their headers checked; with ``load`` their data read and hashed too (see
    :func:`_read_npy` for ``check_crc``)."""
    if info.compress_type == zipfile.ZIP_STORED:
        inner: Any = _Slice(f, _data_start(f, info, label), info.file_size)
    else:
        inner = io.BytesIO(read_member(zf, info, label, max_bytes + (1 << 30)))
    npz_label = f"{label}: {info.filename}"
    npz, members = open_zip(inner, npz_label, max_bytes)
    for name in members:
        if not name.endswith(".npy") or name == ".npy":
            raise CheckpointError(f"{npz_label}: member {name!r} is not a .npy array")
    arrays = {}
    with ThreadPoolExecutor(HASH_WORKERS, "singa-ckpt-hash") as pool:
        for name, m in members.items():
            key = name[:-4]
            try:
                arrays[key] = _read_npy(
                    inner, npz, m, f"{npz_label}: array {key!r}", pool if load else None, check_crc
                )
            except CheckpointError:
                raise
            except zipfile.BadZipFile:  # zipfile's CRC-32 check at the end of a member
                raise CheckpointError(
                    f"{npz_label}: checksum mismatch for array {key!r} (zip CRC-32)"
                ) from None
            except (ValueError, EOFError, zlib.error) as e:
                raise CheckpointError(
                    f"{npz_label}: array {key!r} is not a readable .npy array ({e})"
                ) from None
        for a in arrays.values():
            a.sha256 = a.sha256.result() if isinstance(a.sha256, Future) else a.sha256
    return arrays
