"""Downloads against a local HTTP server on 127.0.0.1 (never the internet)."""

import dataclasses
import gzip
import hashlib
import os

import numpy as np
import pytest

from singa import data
from singa.data import datasets
from singa.data.download import cache_dir, download_file


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def test_download_ok_writes_file_atomically(http_root, tmp_path, capsys):
    root, url = http_root
    payload = os.urandom(300_000)
    (root / "f.bin").write_bytes(payload)
    dest = tmp_path / "out" / "sub" / "f.bin"
    got = download_file(url + "f.bin", dest, _sha(payload), progress=True)
    assert got == dest and dest.read_bytes() == payload
    assert os.listdir(dest.parent) == ["f.bin"]  # no temp file left
    assert "f.bin" in capsys.readouterr().err  # the tqdm bar names the file


def test_checksum_mismatch_raises_and_leaves_nothing(http_root, tmp_path):
    root, url = http_root
    (root / "f.bin").write_bytes(b"served bytes")
    dest = tmp_path / "out" / "f.bin"
    wrong = _sha(b"other bytes")
    with pytest.raises(
        data.ChecksumError, match=f"SHA256 mismatch: got {_sha(b'served bytes')}, expected {wrong}"
    ):
        download_file(url + "f.bin", dest, wrong, progress=False)
    assert not dest.exists() and os.listdir(dest.parent) == []


def test_md5_is_used_when_no_sha256(http_root, tmp_path):
    root, url = http_root
    (root / "f.bin").write_bytes(b"abc")
    download_file(url + "f.bin", tmp_path / "f.bin", md5=hashlib.md5(b"abc").hexdigest(), progress=False)
    assert (tmp_path / "f.bin").read_bytes() == b"abc"
    with pytest.raises(data.ChecksumError, match="MD5 mismatch"):
        download_file(url + "f.bin", tmp_path / "g.bin", md5="0" * 32, progress=False)
    with pytest.raises(ValueError, match="needs a sha256"):
        download_file(url + "f.bin", tmp_path / "h.bin", progress=False)


def test_mirrors_are_tried_in_order(http_root, tmp_path):
    root, url = http_root
    (root / "good").mkdir()
    (root / "good" / "f.bin").write_bytes(b"xyz")
    dest = download_file(
        [url + "missing/f.bin", url + "good/f.bin"], tmp_path / "out" / "f.bin", _sha(b"xyz"), progress=False
    )
    assert dest.read_bytes() == b"xyz"
    with pytest.raises(data.DownloadError) as ei:
        download_file(
            [url + "a/f.bin", url + "b/f.bin"], tmp_path / "out" / "g.bin", _sha(b"xyz"), progress=False
        )
    assert "a/f.bin" in str(ei.value) and "b/f.bin" in str(ei.value) and "404" in str(ei.value)
    assert sorted(os.listdir(tmp_path / "out")) == ["f.bin"]


def test_cache_dir_env_and_default(monkeypatch, tmp_path):
    monkeypatch.setenv("SINGA_DATA", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("SINGA_DATA")
    monkeypatch.delenv("SINGA_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "singa"
    monkeypatch.setenv("SINGA_CACHE_DIR", str(tmp_path / "all"))  # singa's cache folder moves it too
    assert cache_dir() == tmp_path / "all"


def _serve_mnist_like(root, gen, monkeypatch, corrupt=None):
    """Put generated MNIST files on the server and point the registry at it with their checksums."""
    want = gen.write_mnist_like(root, n_train=6, n_test=4, seed=11)
    remote = datasets.REMOTES["mnist"]
    files = {
        split: tuple(
            dataclasses.replace(f, sha256=_sha((root / f.name).read_bytes()), raw_sha256=None) for f in fs
        )
        for split, fs in remote.files.items()
    }
    if corrupt:
        (root / corrupt).write_bytes(gzip.compress(b"tampered"))
    return want, files, remote


def test_load_downloads_into_cache_then_reuses_it(http_root, isolated, gen, monkeypatch):
    root, url = http_root
    cache, _ = isolated
    want, files, remote = _serve_mnist_like(root, gen, monkeypatch)
    monkeypatch.setitem(datasets.REMOTES, "mnist", dataclasses.replace(remote, mirrors=(url,), files=files))
    ds = data.load("mnist", progress=False)
    assert ds.info.source == str(cache / "mnist")
    np.testing.assert_array_equal(ds.y_train, want["y_train"])
    np.testing.assert_array_equal(ds.x_test[:, 0], want["x_test"].astype(np.float32) / np.float32(255))
    assert sorted(os.listdir(cache / "mnist")) == sorted(f.name for fs in files.values() for f in fs)
    # Second load: served nothing any more, still works from the cache (and is verified).
    for p in root.iterdir():
        p.unlink()
    ds2 = data.load("mnist", download=True, progress=False)
    np.testing.assert_array_equal(ds2.x_train, ds.x_train)


def test_load_download_checksum_mismatch_is_reported_and_leaves_nothing(
    http_root, isolated, gen, monkeypatch
):
    root, url = http_root
    cache, _ = isolated
    _, files, remote = _serve_mnist_like(root, gen, monkeypatch, corrupt="t10k-images-idx3-ubyte.gz")
    monkeypatch.setitem(datasets.REMOTES, "mnist", dataclasses.replace(remote, mirrors=(url,), files=files))
    with pytest.raises(data.DatasetNotFoundError) as ei:
        data.load_dataset("mnist", split="test", progress=False)
    msg = str(ei.value)
    assert f"download into {cache / 'mnist'} failed" in msg and "SHA256 mismatch" in msg
    assert "t10k-images-idx3-ubyte.gz" in msg
    assert not (cache / "mnist" / "t10k-images-idx3-ubyte.gz").exists()
    assert [p.name for p in (cache / "mnist").iterdir() if p.name.startswith(".")] == []


def test_load_without_download_does_not_touch_the_network(http_root, isolated, gen, monkeypatch):
    root, url = http_root
    _, files, remote = _serve_mnist_like(root, gen, monkeypatch)
    monkeypatch.setitem(datasets.REMOTES, "mnist", dataclasses.replace(remote, mirrors=(url,), files=files))
    with pytest.raises(data.DatasetNotFoundError, match="download disabled"):
        data.load("mnist", download=False)
