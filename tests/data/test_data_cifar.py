"""CIFAR-10 binary parsing: a generated small tar.gz, the extracted folder, and malformed input."""

import gzip
import tarfile

import numpy as np
import pytest

from singa.data.cifar import (
    parse_cifar10_records,
    read_cifar10_archive,
    read_cifar10_dir,
    read_cifar10_tar,
)
from singa.data.idx import DataFormatError


def test_record_layout_label_then_rgb_planes():
    # One record written by hand: label 7, red plane all 1, green all 2, blue pixel (r, c) = r.
    blue = np.repeat(np.arange(32, dtype=np.uint8), 32)
    record = bytes([7]) + bytes([1] * 1024) + bytes([2] * 1024) + blue.tobytes()
    x, y = parse_cifar10_records(record)
    assert x.shape == (1, 3, 32, 32) and x.dtype == np.uint8
    assert y.tolist() == [7]
    assert (x[0, 0] == 1).all() and (x[0, 1] == 2).all()
    np.testing.assert_array_equal(x[0, 2, :, 5], np.arange(32))  # row-major: row index varies down a column
    assert (x[0, 2, 9] == 9).all()


def test_reads_generated_tar(tmp_path, gen):
    path = tmp_path / "cifar-10-binary.tar.gz"
    want = gen.write_cifar_tar(path, n_per_batch=3)
    both = read_cifar10_archive(path)
    for split, n in (("train", 15), ("test", 3)):
        x, y = both[split]
        assert x.shape == (n, 3, 32, 32) and y.shape == (n,)
        np.testing.assert_array_equal(x, want[split][0])  # batches concatenated in order 1..5
        np.testing.assert_array_equal(y, want[split][1])
        x1, y1 = read_cifar10_tar(path, split)
        np.testing.assert_array_equal(x1, x)
        np.testing.assert_array_equal(y1, y)


def test_reads_extracted_folder(tmp_path, gen):
    path = tmp_path / "c.tar.gz"
    want = gen.write_cifar_tar(path, n_per_batch=2, seed=5)
    with tarfile.open(path) as tar:
        tar.extractall(tmp_path, filter="data")
    x, y = read_cifar10_dir(tmp_path / "cifar-10-batches-bin", "train")
    np.testing.assert_array_equal(x, want["train"][0])
    np.testing.assert_array_equal(y, want["train"][1])


def test_missing_member_names_it(tmp_path, gen):
    path = tmp_path / "c.tar.gz"
    gen.write_cifar_tar(path, skip=("data_batch_3.bin",))
    with pytest.raises(DataFormatError, match=r"missing member\(s\) \['data_batch_3.bin'\].*pickle"):
        read_cifar10_tar(path, "train")
    x, _ = read_cifar10_tar(path, "test")  # the test split is complete
    assert len(x) == 3


def test_bad_record_size_and_label():
    with pytest.raises(DataFormatError, match="not a positive multiple of the 3073-byte"):
        parse_cifar10_records(bytes(3073 * 2 - 1), "b.bin")
    with pytest.raises(DataFormatError, match="not a positive multiple"):
        parse_cifar10_records(b"", "b.bin")
    rec = bytearray(3073 * 2)
    rec[3073] = 10
    with pytest.raises(DataFormatError, match="b.bin: record 1 has label 10"):
        parse_cifar10_records(bytes(rec), "b.bin")


def test_corrupt_archive(tmp_path, gen):
    path = tmp_path / "c.tar.gz"
    gen.write_cifar_tar(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataFormatError, match="corrupt or truncated CIFAR-10 archive"):
        read_cifar10_tar(path, "train")
    path.write_bytes(gzip.compress(b"this is not a tar file" * 100))
    with pytest.raises(DataFormatError, match="corrupt or truncated CIFAR-10 archive"):
        read_cifar10_tar(path, "train")


def test_unknown_split(tmp_path):
    with pytest.raises(ValueError, match="split must be one of"):
        read_cifar10_tar(tmp_path / "x", "val")
