"""Where dataset files come from: data_dir, then the cache, then the Debian folder; errors."""

import gzip
import shutil
import tarfile

import numpy as np
import pytest

from singa import data
from singa.data import datasets


def _expect_float(x_uint8):
    return (x_uint8.astype(np.float32) / np.float32(255))[:, None]


def test_data_dir_beats_cache_beats_debian(tmp_path, isolated, gen):
    cache, debian = isolated
    in_dir = gen.write_mnist_like(tmp_path / "mine", seed=10)
    in_cache = gen.write_mnist_like(cache / "fashion-mnist", seed=20)
    in_debian = gen.write_mnist_like(debian, seed=30)

    ds = data.load("fashion-mnist", data_dir=tmp_path / "mine", verify=False, download=False)
    assert ds.info.source == str(tmp_path / "mine")
    np.testing.assert_array_equal(ds.x_train, _expect_float(in_dir["x_train"]))
    np.testing.assert_array_equal(ds.y_test, in_dir["y_test"])

    shutil.rmtree(tmp_path / "mine")
    ds = data.load("fashion-mnist", data_dir=tmp_path / "mine", verify=False, download=False)
    assert ds.info.source == str(cache / "fashion-mnist")
    np.testing.assert_array_equal(ds.x_train, _expect_float(in_cache["x_train"]))

    shutil.rmtree(cache)
    ds = data.load("fashion-mnist", verify=False, download=False)
    assert ds.info.source == str(debian)
    np.testing.assert_array_equal(ds.x_test, _expect_float(in_debian["x_test"]))
    np.testing.assert_array_equal(ds.y_train, in_debian["y_train"])


def test_arrays_are_float32_nchw_in_unit_range_and_int32_labels(tmp_path, isolated, gen):
    want = gen.write_mnist_like(tmp_path, n_train=9, n_test=4, seed=1)
    x_train, y_train, x_test, y_test = data.load("mnist", data_dir=tmp_path, verify=False, download=False)
    assert x_train.shape == (9, 1, 28, 28) and x_train.dtype == np.float32
    assert x_test.shape == (4, 1, 28, 28)
    assert y_train.dtype == np.int32 and y_test.dtype == np.int32
    assert 0.0 <= x_train.min() and x_train.max() <= 1.0
    # exactly v / 255 rounded to float32
    np.testing.assert_array_equal(x_train[:, 0], want["x_train"].astype(np.float32) / np.float32(255))


def test_subfolder_uncompressed_and_torchvision_layouts(tmp_path, isolated, gen):
    want = gen.write_mnist_like(tmp_path / "mnist", gz=False, seed=4)
    x, y = data.load_dataset("mnist", data_dir=tmp_path, split="train", verify=False, download=False)
    np.testing.assert_array_equal(y, want["y_train"])
    want = gen.write_mnist_like(tmp_path / "tv" / "FashionMNIST" / "raw", seed=5)
    x, y = data.load_dataset(
        "fashion-mnist", data_dir=tmp_path / "tv", split="test", verify=False, download=False
    )
    np.testing.assert_array_equal(x, _expect_float(want["x_test"]))


def test_one_split_needs_only_its_files(tmp_path, isolated, gen):
    want = gen.write_mnist_like(tmp_path, seed=6)
    for f in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"):
        (tmp_path / f).unlink()
    x, y = data.load_dataset("mnist", data_dir=tmp_path, split="test", verify=False, download=False)
    np.testing.assert_array_equal(y, want["y_test"])
    with pytest.raises(data.DatasetNotFoundError, match="missing train-images-idx3-ubyte.gz, train-labels"):
        data.load_dataset("mnist", data_dir=tmp_path, split="train", download=False)


def test_partial_folder_is_skipped_for_a_complete_one(tmp_path, isolated, gen):
    cache, _ = isolated
    gen.write_mnist_like(tmp_path, seed=1)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    want = gen.write_mnist_like(cache / "mnist", seed=2)
    ds = data.load("mnist", data_dir=tmp_path, verify=False, download=False)
    assert ds.info.source == str(cache / "mnist")
    np.testing.assert_array_equal(ds.y_train, want["y_train"])


def test_not_found_error_says_where_and_how(tmp_path, isolated):
    cache, debian = isolated
    with pytest.raises(data.DatasetNotFoundError) as ei:
        data.load("fashion-mnist", data_dir=tmp_path / "nowhere", download=False)
    msg = str(ei.value)
    for needle in (
        "dataset 'fashion-mnist' not found",
        "t10k-labels-idx1-ubyte.gz",
        f"{tmp_path / 'nowhere'} (data_dir): no such folder",
        f"{cache / 'fashion-mnist'} (cache folder; set $SINGA_DATA",
        f"{debian} (Debian package dataset-fashion-mnist)",
        "download disabled (download=False)",
        "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/train-images-idx3-ubyte.gz",
        "--data-dir",
        "apt-get install dataset-fashion-mnist",
        "fashion-mnist-mini",
    ):
        assert needle in msg, (needle, msg)
    # the error is a FileNotFoundError; MNIST's message has no Debian hint
    assert isinstance(ei.value, FileNotFoundError)
    with pytest.raises(data.DatasetNotFoundError) as ei:
        data.load("mnist", download=False)
    assert "Debian" not in str(ei.value) and "ossci-datasets" in str(ei.value)


def test_found_files_are_checked_against_published_checksums(tmp_path, isolated, gen):
    gen.write_mnist_like(tmp_path, seed=7)
    with pytest.raises(
        data.ChecksumError, match=r"train-images-idx3-ubyte\.gz does not match the published.*verify=False"
    ):
        data.load("mnist", data_dir=tmp_path, download=False)


def test_corrupt_or_inconsistent_files_give_clear_errors(tmp_path, isolated, gen):
    gen.write_mnist_like(tmp_path, n_train=5, n_test=3, seed=8)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(
        gzip.compress(gen.idx_bytes(np.array([1, 2, 3, 4], dtype=np.uint8)))
    )
    with pytest.raises(
        data.DataFormatError, match="holds 3 images but .*t10k-labels-idx1-ubyte.gz holds 4 labels"
    ):
        data.load_dataset("mnist", data_dir=tmp_path, split="test", verify=False, download=False)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(
        gzip.compress(gen.idx_bytes(np.array([1, 12, 3], dtype=np.uint8)))
    )
    with pytest.raises(data.DataFormatError, match="label 12 out of range 0-9"):
        data.load_dataset("mnist", data_dir=tmp_path, split="test", verify=False, download=False)
    (tmp_path / "t10k-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b garbage")
    with pytest.raises(data.DataFormatError, match="t10k-images-idx3-ubyte.gz: corrupt or truncated gzip"):
        data.load_dataset("mnist", data_dir=tmp_path, split="test", verify=False, download=False)


def test_cifar10_tar_and_extracted_folder(tmp_path, isolated, gen):
    cache, _ = isolated
    want = gen.write_cifar_tar(tmp_path / "cifar-10-binary.tar.gz", n_per_batch=2)
    ds = data.load("cifar10", data_dir=tmp_path, verify=False, download=False)
    assert ds.x_train.shape == (10, 3, 32, 32) and ds.x_test.shape == (2, 3, 32, 32)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32
    np.testing.assert_array_equal(ds.x_train, want["train"][0].astype(np.float32) / np.float32(255))
    np.testing.assert_array_equal(ds.y_test, want["test"][1])
    assert ds.info.num_channels == 3 and ds.info.class_names[0] == "airplane"
    with pytest.raises(data.ChecksumError, match="is not the published c4a38c50"):
        data.load("cifar10", data_dir=tmp_path, download=False)

    (cache / "cifar10").mkdir(parents=True)
    with tarfile.open(tmp_path / "cifar-10-binary.tar.gz") as tar:
        tar.extractall(cache / "cifar10", filter="data")
    x, y = data.load_dataset("cifar10", split="test", verify=False, download=False)
    np.testing.assert_array_equal(y, want["test"][1])
    with pytest.raises(data.DataFormatError, match="the test split has 2 images, expected 10000"):
        data.load_dataset("cifar10", split="test", download=False)


def test_debian_path_constant_is_the_package_location():
    assert str(datasets.DEBIAN_FASHION_MNIST_DIR) == "/usr/share/datasets/fashion-mnist"
