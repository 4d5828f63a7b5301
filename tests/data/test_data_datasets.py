"""The registry: fashion-mnist-mini (embedded), synthetic, metadata, and the real files where present."""

import gzip
import hashlib

import numpy as np
import pytest

from singa import data
from singa.data import datasets, sources


def test_embedded_files_match_published_checksums():
    # Published SHA-256 / MD5 of the decompressed Fashion-MNIST test split (upstream README /
    # torchvision-derived lists), and the recorded hash of the shipped .gz bytes.
    published = {
        "t10k-images-idx3-ubyte.gz": (
            "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
            "8181f5470baa50b63fa0f6fddb340f0a",
        ),
        "t10k-labels-idx1-ubyte.gz": (
            "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
            "15d484375f8d13e6eb1aabb0c3f46965",
        ),
    }
    for name, (sha, md5) in published.items():
        raw = (datasets.EMBEDDED_DIR / name).read_bytes()
        assert hashlib.sha256(raw).hexdigest() == sources.EMBEDDED_SHA256[name]
        content = gzip.decompress(raw)
        assert hashlib.sha256(content).hexdigest() == sha
        assert hashlib.md5(content).hexdigest() == md5 == sources.EMBEDDED_RAW_MD5[name]
    assert (datasets.EMBEDDED_DIR / "LICENSE-fashion-mnist.txt").read_text().count("MIT License") == 1


def test_fashion_mnist_mini_shapes_classes_and_split(isolated):
    ds = data.load("fashion-mnist-mini", download=False)
    assert ds.x_train.shape == (8000, 1, 28, 28) and ds.x_val.shape == (2000, 1, 28, 28)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32
    assert 0.0 == ds.x_train.min() and ds.x_train.max() == 1.0
    assert ds.info.num_classes == 10 and ds.info.sample_shape == (1, 28, 28)
    assert ds.info.class_names[9] == "Ankle boot" and ds.info.splits == ("train", "val")
    assert ds.info.source == "embedded"
    np.testing.assert_array_equal(np.bincount(ds.y_train), [800] * 10)  # stratified
    np.testing.assert_array_equal(np.bincount(ds.y_val), [200] * 10)
    # The split is the fixed rule: every fifth image of each class goes to validation.
    y_all = np.frombuffer(
        gzip.decompress((datasets.EMBEDDED_DIR / "t10k-labels-idx1-ubyte.gz").read_bytes())[8:], np.uint8
    )
    val = np.zeros(10000, bool)
    for c in range(10):
        val[np.flatnonzero(y_all == c)[4::5]] = True
    np.testing.assert_array_equal(ds.y_val, y_all[val])
    np.testing.assert_array_equal(ds.y_train, y_all[~val])
    # Deterministic, and the single-split loader gives the same arrays.
    x_val, y_val = data.load_dataset("fashion-mnist-mini", split="val")
    np.testing.assert_array_equal(x_val, ds.x_val)
    np.testing.assert_array_equal(y_val, ds.y_val)
    # Pinned digests of the validation split (labels as little-endian int32, pixels as bytes):
    # the split must never change between releases.
    assert (
        hashlib.sha256(ds.y_val.astype("<i4").tobytes()).hexdigest()
        == "3cd1c33e8ce3e633971fe89a7e88864251a6b510beb156b077d5e5b6f0a7f245"
    )
    assert (
        hashlib.sha256((ds.x_val * 255).round().astype(np.uint8).tobytes()).hexdigest()
        == "cfb71f11e38ba04069699e05c0e35502c99ea47e410e9e38eb4e3e78c4d6985e"
    )
    with pytest.raises(ValueError, match=r"has splits \('train', 'val'\), not 'test'"):
        data.load_dataset("fashion-mnist-mini", split="test")


def test_synthetic_any_shape_seeded_and_learnable():
    ds = data.load("synthetic", shape=(3, 8, 5), num_classes=4, n=64, n_test=16, seed=1)
    assert ds.x_train.shape == (64, 3, 8, 5) and ds.x_test.shape == (16, 3, 8, 5)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32
    assert ds.y_train.min() >= 0 and ds.y_train.max() < 4
    assert 0 <= ds.x_train.min() and ds.x_train.max() <= 1
    assert ds.info.num_classes == 4 and ds.info.num_channels == 3 and ds.info.image_size == (8, 5)
    again = data.load("synthetic", shape=(3, 8, 5), num_classes=4, n=64, n_test=16, seed=1)
    np.testing.assert_array_equal(again.x_train, ds.x_train)
    other = data.load("synthetic", shape=(3, 8, 5), num_classes=4, n=64, n_test=16, seed=2)
    assert not np.array_equal(other.x_train, ds.x_train)
    x, y = data.load_dataset(
        "synthetic", split="test", shape=(3, 8, 5), num_classes=4, n=64, n_test=16, seed=1
    )
    np.testing.assert_array_equal(x, ds.x_test)
    # learnable: nearest class mean (from train) classifies the test split well above chance
    means = np.stack([ds.x_train[ds.y_train == c].mean(0) for c in range(4)])
    pred = np.argmin(((ds.x_test[:, None] - means[None]) ** 2).sum(axis=(2, 3, 4)), axis=1)
    assert (pred == ds.y_test).mean() > 0.9
    flat = data.load("synthetic", shape=(20,), n=8)
    assert flat.x_train.shape == (8, 20) and flat.x_test.shape == (2, 20)
    with pytest.raises(ValueError, match="positive sizes"):
        data.load("synthetic", shape=(0, 3))


def test_registry_names_aliases_and_info():
    assert data.available_datasets() == [
        "mnist",
        "fashion-mnist",
        "fashion-mnist-mini",
        "cifar10",
        "synthetic",
    ]
    assert data.dataset_info("CIFAR-10").name == "cifar10"
    assert data.dataset_info("fashion_mnist").class_names[0] == "T-shirt/top"
    info = data.dataset_info("mnist")
    assert (info.num_classes, info.num_channels, info.image_size, info.test_split) == (
        10,
        1,
        (28, 28),
        "test",
    )
    assert data.dataset_info("cifar10").sample_shape == (3, 32, 32)
    syn = data.dataset_info("synthetic", shape=(2, 4, 4), num_classes=3)
    assert (syn.num_classes, syn.num_channels, syn.class_names) == (3, 2, ("0", "1", "2"))
    with pytest.raises(ValueError, match="unknown dataset 'imagenet'; available: mnist"):
        data.load("imagenet")
    with pytest.raises(TypeError, match="takes no options"):
        data.load("mnist", shape=(1, 2, 2))


def test_full_fashion_mnist_from_debian_package_if_installed(monkeypatch, tmp_path):
    if not (datasets.DEBIAN_FASHION_MNIST_DIR / "t10k-images-idx3-ubyte.gz").exists():
        pytest.skip("Debian package dataset-fashion-mnist not installed")
    monkeypatch.setenv("SINGA_DATA", str(tmp_path / "empty-cache"))
    x, y = data.load_dataset("fashion-mnist", split="test", download=False)  # verified against the checksums
    assert x.shape == (10000, 1, 28, 28) and np.bincount(y).tolist() == [1000] * 10
    mini = data.load("fashion-mnist-mini")
    np.testing.assert_array_equal(np.sort(np.concatenate([mini.y_train, mini.y_val])), np.sort(y))
