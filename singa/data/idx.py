"""Reader for the IDX format of MNIST and Fashion-MNIST (optionally gzip-compressed).

An IDX file is a 4-byte magic number ``0x00 0x00 <type> <ndim>``, then ``ndim``
big-endian uint32 sizes, then the values in C order, big-endian. MNIST images are
``<type>=0x08`` (unsigned byte) with 3 dimensions (N, rows, cols), labels the same
type with 1 dimension (N).

Example::

    from singa.data.idx import read_idx
    images = read_idx("train-images-idx3-ubyte.gz")   # uint8 (60000, 28, 28)
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib

import numpy as np

__all__ = ["DataFormatError", "read_idx", "decompress", "IDX_TYPES"]

#: IDX type code -> numpy dtype (big-endian as stored in the file).
IDX_TYPES = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

_GZIP_MAGIC = b"\x1f\x8b"


class DataFormatError(ValueError):
    """A data file is corrupt, truncated, or not in the expected format."""


def decompress(data: bytes, what: str = "data") -> bytes:
    """Gunzip ``data`` if it starts with the gzip magic number, else return it unchanged.

    Raises:
        DataFormatError: the gzip stream is corrupt or truncated (``what`` names the file).
    """
    if data[:2] != _GZIP_MAGIC:
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:
        raise DataFormatError(f"{what}: corrupt or truncated gzip data ({e})") from e


def read_idx(
    source: str | os.PathLike | bytes,
    *,
    expected_ndim: int | None = None,
    expected_type: int | None = None,
    name: str | None = None,
) -> np.ndarray:
    """Parse an IDX file (plain or ``.gz``) into a numpy array in native byte order.

    Args:
        source: a path, or the file's bytes (compressed or not).
        expected_ndim: if given, the number of dimensions the magic number must declare.
        expected_type: if given, the IDX type code the magic number must declare
            (``0x08`` for unsigned bytes).
        name: how to name the file in error messages (defaults to the path).

    Returns:
        An array of the declared shape and type (uint8 for MNIST), native byte order.

    Raises:
        DataFormatError: bad magic number, unknown type, unexpected rank or type,
            or a data section that is shorter or longer than the header declares.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        raw = bytes(source)
        what = name or "IDX data"
    else:
        what = name or os.fspath(source)
        with open(source, "rb") as f:
            raw = f.read()
    data = decompress(raw, what)
    if len(data) < 4:
        raise DataFormatError(f"{what}: not an IDX file (only {len(data)} bytes)")
    zero, type_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or type_code not in IDX_TYPES or ndim == 0:
        raise DataFormatError(
            f"{what}: not an IDX file (magic number 0x{data[:4].hex()}, expected 0x0000TTNN with "
            f"a known type TT in {sorted(hex(t) for t in IDX_TYPES)} and NN >= 1 dimensions)"
        )
    if expected_type is not None and type_code != expected_type:
        raise DataFormatError(
            f"{what}: IDX type 0x{type_code:02x} ({IDX_TYPES[type_code]}), expected 0x{expected_type:02x}"
        )
    if expected_ndim is not None and ndim != expected_ndim:
        raise DataFormatError(
            f"{what}: IDX magic number 0x{data[:4].hex()} declares {ndim} dimensions, "
            f"expected {expected_ndim}"
        )
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataFormatError(f"{what}: truncated IDX header ({len(data)} bytes, need {header})")
    shape = struct.unpack(f">{ndim}I", data[4:header])
    dtype = IDX_TYPES[type_code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    actual = len(data) - header
    if actual != expected:
        kind = "truncated" if actual < expected else "has trailing bytes"
        raise DataFormatError(
            f"{what}: IDX file {kind}: header declares shape {tuple(shape)} of {dtype} "
            f"({expected} data bytes) but the file holds {actual}"
        )
    arr = np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)
    return arr.astype(dtype.newbyteorder("="), copy=True)
