"""Writing a checkpoint's zip: members, and ``tensor_dict.npz`` streamed from the
arrays' memory with numpy's ``.npy`` headers (never pickle) while worker threads
compute each member's SHA-256."""

from __future__ import annotations

import io
import os
import zipfile
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
from numpy.lib import format as npy

from singa.checkpoint.fileformat.hashing import (
    CHUNK,
    HASH_WORKERS,
    hash_member,
    memory_bytes,
    resolved,
    submit,
)

SYNC_EVERY = 32 << 20  # bytes written between background fdatasyncs of a save

_fdatasync = getattr(os, "fdatasync", os.fsync)


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
    header, data = npy_header(arr), memory_bytes(arr)
    info.file_size = len(header) + data.nbytes
    digest = hash_member(pool, header, data)
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
                    synced, syncing = f.tell(), submit(pool, _fdatasync, f.fileno())
        if syncing is not None:
            syncing.result()  # raise its error, if any
        return {k: resolved(d) for k, d in digests.items()}
