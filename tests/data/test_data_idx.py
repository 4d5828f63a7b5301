"""IDX parsing: generated files (plain and gzip), every IDX type, and corrupt files."""

import gzip

import numpy as np
import pytest

from singa.data.idx import DataFormatError, read_idx


def test_reads_uint8_images_plain_and_gz(tmp_path, gen):
    x, _ = gen.make_images_labels(7, seed=3, size=5)
    data = gen.idx_bytes(x)
    (tmp_path / "a").write_bytes(data)
    (tmp_path / "a.gz").write_bytes(gzip.compress(data))
    for p in (tmp_path / "a", tmp_path / "a.gz"):
        got = read_idx(p, expected_ndim=3, expected_type=0x08)
        assert got.dtype == np.uint8 and got.shape == (7, 5, 5)
        np.testing.assert_array_equal(got, x)
    np.testing.assert_array_equal(read_idx(data), x)  # bytes work too
    got[0, 0, 0] = 1  # the result is a writable copy


@pytest.mark.parametrize(
    "code,dtype",
    [
        (0x08, np.uint8),
        (0x09, np.int8),
        (0x0B, np.int16),
        (0x0C, np.int32),
        (0x0D, np.float32),
        (0x0E, np.float64),
    ],
)
def test_every_type_is_big_endian_and_returned_native(code, dtype, gen):
    arr = (np.arange(24).reshape(2, 3, 4) - (0 if code == 0x08 else 5)).astype(dtype)
    data = gen.idx_bytes(arr, code)
    first = {  # the first value (-5, or 0 for uint8) as stored big-endian
        0x08: "00",
        0x09: "fb",
        0x0B: "fffb",
        0x0C: "fffffffb",
        0x0D: "c0a00000",
        0x0E: "c014000000000000",
    }[code]
    assert data[16 : 16 + len(first) // 2].hex() == first
    got = read_idx(data)
    assert got.dtype == np.dtype(dtype) and got.dtype.isnative
    np.testing.assert_array_equal(got, arr)


def test_labels_one_dimensional(gen):
    y = np.array([3, 1, 4, 1, 5, 9], dtype=np.uint8)
    np.testing.assert_array_equal(read_idx(gen.idx_bytes(y), expected_ndim=1), y)


def test_bad_magic(gen):
    data = bytearray(gen.idx_bytes(np.zeros((2, 3), np.uint8)))
    data[0] = 0x12
    with pytest.raises(DataFormatError, match=r"myfile: not an IDX file \(magic number 0x12000802"):
        read_idx(bytes(data), name="myfile")


def test_unknown_type_code(gen):
    data = bytearray(gen.idx_bytes(np.zeros((2, 3), np.uint8)))
    data[2] = 0x07
    with pytest.raises(DataFormatError, match="not an IDX file"):
        read_idx(bytes(data))


def test_wrong_rank_and_type_rejected(gen):
    labels = gen.idx_bytes(np.zeros(4, np.uint8))
    with pytest.raises(DataFormatError, match="declares 1 dimensions, expected 3"):
        read_idx(labels, expected_ndim=3)
    with pytest.raises(DataFormatError, match="IDX type 0x0c"):
        read_idx(gen.idx_bytes(np.zeros(4, np.int32), 0x0C), expected_type=0x08)


def test_truncated_data_and_trailing_bytes(tmp_path, gen):
    data = gen.idx_bytes(np.zeros((3, 4, 4), np.uint8))
    p = tmp_path / "images-idx3-ubyte"
    p.write_bytes(data[:-1])
    with pytest.raises(
        DataFormatError, match=r"images-idx3-ubyte: IDX file truncated: .*\(3, 4, 4\).*48 data bytes.*47"
    ):
        read_idx(p)
    p.write_bytes(data + b"\x00")
    with pytest.raises(DataFormatError, match="trailing bytes"):
        read_idx(p)


def test_truncated_header_and_tiny_file(gen):
    data = gen.idx_bytes(np.zeros((3, 4, 4), np.uint8))
    with pytest.raises(DataFormatError, match="truncated IDX header"):
        read_idx(data[:10])
    with pytest.raises(DataFormatError, match="only 2 bytes"):
        read_idx(b"\x00\x00")


def test_corrupt_and_truncated_gzip(tmp_path, gen):
    gz = gzip.compress(gen.idx_bytes(np.arange(200, dtype=np.uint8).reshape(2, 100)))
    p = tmp_path / "x.gz"
    p.write_bytes(gz[: len(gz) // 2])
    with pytest.raises(DataFormatError, match=r"x\.gz: corrupt or truncated gzip"):
        read_idx(p)
    bad = bytearray(gz)
    bad[-6] ^= 0xFF  # break the CRC
    p.write_bytes(bytes(bad))
    with pytest.raises(DataFormatError, match="corrupt or truncated gzip"):
        read_idx(p)
