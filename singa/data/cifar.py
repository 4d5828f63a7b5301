"""Reader for the BINARY version of CIFAR-10 (``cifar-10-binary.tar.gz``); never pickle.

The archive holds ``cifar-10-batches-bin/data_batch_1.bin`` ... ``data_batch_5.bin``
(training) and ``test_batch.bin``. Each file is a sequence of 3073-byte records: one
label byte (0-9), then 3072 pixel bytes: the 1024 red values of the 32x32 image in
row-major order, then the 1024 green, then the 1024 blue. Members are read from the
tar.gz in memory with :mod:`tarfile`; nothing is extracted to disk.

Example::

    from singa.data.cifar import read_cifar10_tar
    x_train, y_train = read_cifar10_tar("cifar-10-binary.tar.gz", "train")  # uint8 (50000, 3, 32, 32)
"""

from __future__ import annotations

import os
import tarfile
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from singa.data.idx import DataFormatError

__all__ = [
    "read_cifar10_archive",
    "read_cifar10_tar",
    "read_cifar10_dir",
    "parse_cifar10_records",
    "CIFAR10_MEMBERS",
]

RECORD_BYTES = 1 + 3 * 32 * 32
NUM_CLASSES = 10

#: split -> member file names (basenames) in the order they are concatenated.
CIFAR10_MEMBERS = {
    "train": tuple(f"data_batch_{i}.bin" for i in range(1, 6)),
    "test": ("test_batch.bin",),
}


def parse_cifar10_records(data: bytes, name: str = "CIFAR-10 batch") -> tuple[np.ndarray, np.ndarray]:
    """Decode CIFAR-10 binary records into uint8 images (N, 3, 32, 32) and uint8 labels (N,).

    Raises:
        DataFormatError: the size is not a positive multiple of 3073 bytes, or a label is not 0-9.
    """
    if len(data) == 0 or len(data) % RECORD_BYTES:
        raise DataFormatError(
            f"{name}: {len(data)} bytes is not a positive multiple of the {RECORD_BYTES}-byte "
            "CIFAR-10 record (1 label byte + 3072 pixel bytes)"
        )
    rec = np.frombuffer(data, dtype=np.uint8).reshape(-1, RECORD_BYTES)
    labels = rec[:, 0].copy()
    if labels.max() >= NUM_CLASSES:
        bad = int(np.argmax(labels >= NUM_CLASSES))
        raise DataFormatError(f"{name}: record {bad} has label {labels[bad]}, expected 0-{NUM_CLASSES - 1}")
    images = rec[:, 1:].reshape(-1, 3, 32, 32).copy()
    return images, labels


def _check_split(split: str) -> tuple[str, ...]:
    if split not in CIFAR10_MEMBERS:
        raise ValueError(f"CIFAR-10 split must be one of {sorted(CIFAR10_MEMBERS)}, got {split!r}")
    return CIFAR10_MEMBERS[split]


def _concat(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def read_cifar10_archive(
    path: str | os.PathLike, splits: Sequence[str] = ("train", "test")
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Read several splits from ``cifar-10-binary.tar.gz`` in one pass, without extracting it.

    Members are matched by base name (``data_batch_1.bin`` ... ``data_batch_5.bin``,
    ``test_batch.bin``) wherever they sit in the archive; only regular files count.

    Returns:
        split -> (images uint8 (N, 3, 32, 32), labels uint8 (N,)).

    Raises:
        DataFormatError: the archive is corrupt, a member is missing or malformed.
    """
    wanted = {m for s in splits for m in _check_split(s)}
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                base = member.name.rsplit("/", 1)[-1]
                if base in wanted and member.isfile() and base not in found:
                    f = tar.extractfile(member)
                    if f is not None:
                        found[base] = f.read()
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        raise DataFormatError(f"{os.fspath(path)}: corrupt or truncated CIFAR-10 archive ({e})") from e
    missing = sorted(wanted - set(found))
    if missing:
        raise DataFormatError(
            f"{os.fspath(path)}: not the CIFAR-10 binary archive; missing member(s) {missing} "
            "(expected cifar-10-batches-bin/data_batch_1..5.bin and test_batch.bin; note that the "
            "python/pickle version cifar-10-python.tar.gz is not supported)"
        )
    return {
        s: _concat([parse_cifar10_records(found[m], f"{os.fspath(path)}:{m}") for m in CIFAR10_MEMBERS[s]])
        for s in splits
    }


def read_cifar10_tar(path: str | os.PathLike, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Read one split ("train" or "test") from ``cifar-10-binary.tar.gz``.

    Returns:
        (images uint8 (N, 3, 32, 32), labels uint8 (N,)).
    """
    return read_cifar10_archive(path, (split,))[split]


def read_cifar10_dir(folder: str | os.PathLike, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Read one split from an extracted ``cifar-10-batches-bin`` folder (same result as the tar)."""
    wanted = _check_split(split)
    parts = []
    for m in wanted:
        p = Path(folder) / m
        if not p.is_file():
            raise DataFormatError(f"{p}: missing CIFAR-10 batch file")
        parts.append(parse_cifar10_records(p.read_bytes(), os.fspath(p)))
    return _concat(parts)
