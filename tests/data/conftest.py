"""Fixtures for the data-layer tests: generated IDX/CIFAR files, an isolated cache, a local HTTP server."""

from __future__ import annotations

import functools
import gzip
import http.server
import io
import struct
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest

from singa.data import datasets


def idx_bytes(arr: np.ndarray, type_code: int = 0x08) -> bytes:
    """Encode ``arr`` as an IDX file (big-endian header, values as stored)."""
    dtype = {0x08: "u1", 0x09: "i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}[type_code]
    header = struct.pack(">HBB", 0, type_code, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return header + np.ascontiguousarray(arr, dtype=dtype).tobytes()


def make_images_labels(n: int, seed: int, size: int = 28, num_classes: int = 10):
    """Random uint8 images (n, size, size) and labels 0..num_classes-1."""
    rng = np.random.default_rng(seed)
    return (
        rng.integers(0, 256, size=(n, size, size), dtype=np.uint8),
        rng.integers(0, num_classes, size=n, dtype=np.uint8),
    )


def write_mnist_like(
    folder: Path, n_train: int = 12, n_test: int = 5, seed: int = 0, gz: bool = True
) -> dict:
    """Write the four MNIST-layout IDX files into ``folder``; returns the uint8 arrays."""
    folder.mkdir(parents=True, exist_ok=True)
    xtr, ytr = make_images_labels(n_train, seed)
    xte, yte = make_images_labels(n_test, seed + 1)
    content = {
        "train-images-idx3-ubyte": idx_bytes(xtr),
        "train-labels-idx1-ubyte": idx_bytes(ytr),
        "t10k-images-idx3-ubyte": idx_bytes(xte),
        "t10k-labels-idx1-ubyte": idx_bytes(yte),
    }
    for name, data in content.items():
        if gz:
            (folder / f"{name}.gz").write_bytes(gzip.compress(data, mtime=0))
        else:
            (folder / name).write_bytes(data)
    return {"x_train": xtr, "y_train": ytr, "x_test": xte, "y_test": yte}


def cifar_records(images: np.ndarray, labels: np.ndarray) -> bytes:
    """CIFAR-10 binary records: 1 label byte + 3072 pixel bytes (R, G, B planes) each."""
    return (
        np.concatenate([labels[:, None], images.reshape(len(images), -1)], axis=1).astype(np.uint8).tobytes()
    )


def write_cifar_tar(path: Path, n_per_batch: int = 3, seed: int = 0, skip: tuple = ()) -> dict:
    """Write a small cifar-10-binary.tar.gz; returns the uint8 arrays per split."""
    rng = np.random.default_rng(seed)
    out = {}
    members = {}
    for split, names in (
        ("train", [f"data_batch_{i}.bin" for i in range(1, 6)]),
        ("test", ["test_batch.bin"]),
    ):
        xs, ys = [], []
        for name in names:
            x = rng.integers(0, 256, size=(n_per_batch, 3, 32, 32), dtype=np.uint8)
            y = rng.integers(0, 10, size=n_per_batch, dtype=np.uint8)
            xs.append(x)
            ys.append(y)
            members[name] = cifar_records(x, y)
        out[split] = (np.concatenate(xs), np.concatenate(ys))
    with tarfile.open(path, "w:gz") as tar:
        for extra in ("batches.meta.txt", "readme.html"):
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{extra}")
            info.size = 3
            tar.addfile(info, io.BytesIO(b"abc"))
        for name, data in members.items():
            if name in skip:
                continue
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """An empty cache folder ($SINGA_DATA) and an empty Debian folder; returns (cache, debian)."""
    cache = tmp_path / "cache"
    debian = tmp_path / "debian-fashion-mnist"
    monkeypatch.setenv("SINGA_DATA", str(cache))
    monkeypatch.setattr(datasets, "DEBIAN_FASHION_MNIST_DIR", debian)
    return cache, debian


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass


@pytest.fixture
def http_root(tmp_path, monkeypatch):
    """Serve a fresh folder over HTTP on 127.0.0.1; yields (folder, base URL ending in '/')."""
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    root = tmp_path / "served"
    root.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def gen():
    """The file generators above, for the test modules (conftest is not importable by name)."""
    import types

    return types.SimpleNamespace(
        idx_bytes=idx_bytes,
        make_images_labels=make_images_labels,
        write_mnist_like=write_mnist_like,
        cifar_records=cifar_records,
        write_cifar_tar=write_cifar_tar,
    )
