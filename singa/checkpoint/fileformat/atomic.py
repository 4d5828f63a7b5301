"""Atomic replacement of a checkpoint file: write a temporary file next to the
target, fsync it, rename it over the target, fsync the folder. A crash at any
moment leaves the old file or the new one; temporaries of killed saves are removed
by the next save to the same path."""

from __future__ import annotations

import hashlib
import os
import socket
import stat
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from singa.checkpoint.fileformat.hashing import submit

_TMP_TAG = ".singa-tmp."
_active_tmp: set[str] = set()
_active_lock = threading.Lock()


def host_tag() -> str:
    """This host's name as it appears in temporary file names."""
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


def _stale_pid(name: str, prefix: str, host: str) -> int | None:
    """The process id in a temporary's name when it belongs to a save of this host."""
    parts = name[len(prefix) :].rsplit(".", 2)
    if len(parts) != 3 or parts[0] != host or not parts[1].isdigit():
        return None
    return int(parts[1])


def remove_stale_temporaries(folder: str, base: str) -> list[str]:
    """Remove temporary files left next to ``base`` by saves of this host whose
    process no longer exists (killed mid-save). Returns the removed paths."""
    if os.name != "posix":
        return []
    prefix, host, removed = _tmp_prefix(base), host_tag(), []
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return []
    for name in names:
        pid = _stale_pid(name, prefix, host) if name.startswith(prefix) else None
        if pid is None:
            continue
        path = os.path.join(folder, name)
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
        _closing = submit(_closer, os.close, fd)


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
    tmp = os.path.join(folder, f"{_tmp_prefix(base)}{host_tag()}.{os.getpid()}.{os.urandom(6).hex()}")
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
    _fsync_folder(folder)
    return target


def _fsync_folder(folder: str) -> None:
    """Make a rename in ``folder`` durable (POSIX; best effort)."""
    if os.name != "posix":
        return
    try:
        dfd = os.open(folder or ".", os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


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
