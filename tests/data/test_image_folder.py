"""ImageFolder: torchvision's class order and sample order, modes, sizes, lazy decoding,
bad images and folders."""

from __future__ import annotations

import os

import numpy as np
import pytest
from image_data import make_image_folder, pattern_image, write_image

from singa import data


def _layout(root):
    """Classes whose sorted order differs from creation order and from case-folding."""
    rng = np.random.default_rng(0)
    for name, n in (("b_cat", 2), ("Zebra", 1), ("a_dog", 3), ("10", 1), ("9", 1)):
        for k in range(n):
            write_image(root / name / f"{k}.png", pattern_image(k, rng))
    write_image(root / "a_dog" / "sub" / "deep.jpg", pattern_image(0, rng))  # walked recursively
    (root / "a_dog" / "notes.txt").write_text("not an image")
    (root / "a_dog" / ".hidden.png").write_bytes(b"junk")
    return root


def test_class_mapping_follows_torchvision_rules(tmp_path):
    root = _layout(tmp_path / "f")
    ds = data.ImageFolder(root)
    # hand-written rule: sub-folder names sorted by code point
    assert ds.classes == ["10", "9", "Zebra", "a_dog", "b_cat"]
    assert ds.class_to_idx == {"10": 0, "9": 1, "Zebra": 2, "a_dog": 3, "b_cat": 4}
    rel = [(os.path.relpath(p, root), t) for p, t in ds.samples]
    assert rel == [
        ("10/0.png", 0),
        ("9/0.png", 1),
        ("Zebra/0.png", 2),
        ("a_dog/0.png", 3),
        ("a_dog/1.png", 3),
        ("a_dog/2.png", 3),
        (os.path.join("a_dog", "sub", "deep.jpg"), 3),
        ("b_cat/0.png", 4),
        ("b_cat/1.png", 4),
    ]
    assert ds.targets == [t for _, t in rel]


def test_class_mapping_matches_torchvision_when_it_imports(tmp_path):
    root = _layout(tmp_path / "f")
    (root / "a_dog" / ".hidden.png").unlink()  # torchvision would list it (and fail to open it)
    try:
        from torchvision.datasets import ImageFolder as TVImageFolder
    except Exception:
        pytest.skip("torchvision does not import")
    tv = TVImageFolder(str(root))
    ds = data.ImageFolder(root)
    assert ds.classes == tv.classes and ds.class_to_idx == tv.class_to_idx
    assert ds.samples == [(p, t) for p, t in tv.samples]


@pytest.mark.parametrize("channels,mode", [(3, "RGB"), (1, "L")])
def test_mode_and_size_come_from_the_first_image(tmp_path, channels, mode):
    root = make_image_folder(tmp_path / "f", per_class=2, size=10, channels=channels)
    rng = np.random.default_rng(1)
    write_image(root / "square" / "big.png", pattern_image(1, rng, size=20, channels=3))  # resized, converted
    ds = data.ImageFolder(root)
    assert ds.mode == mode and ds.image_size == (10, 10) and ds.channels == channels
    x, y = ds[ds.samples.index((str(root / "square" / "big.png"), 1))]
    assert x.shape == (channels, 10, 10) and x.dtype == np.float32 and y == 1
    assert 0.0 <= x.min() and x.max() <= 1.0


def test_pixels_are_the_decoded_png_scaled_to_unit_range(tmp_path):
    img = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3) * 3
    write_image(tmp_path / "f" / "a" / "x.png", img)
    write_image(tmp_path / "f" / "b" / "y.png", img[::-1].copy())
    ds = data.ImageFolder(tmp_path / "f")
    x, _ = ds[0]
    np.testing.assert_array_equal(x, img.transpose(2, 0, 1).astype(np.float32) / 255)
    xb, yb = ds.get_batch([1, 0])
    np.testing.assert_array_equal(xb[1], x)
    assert yb.tolist() == [1, 0]


def test_forced_mode_and_size(tmp_path):
    root = make_image_folder(tmp_path / "f", per_class=2, size=12)
    ds = data.ImageFolder(root, mode="L", image_size=(6, 8))
    x, _ = ds[0]
    assert x.shape == (1, 6, 8)
    with pytest.raises(ValueError, match="mode must be"):
        data.ImageFolder(root, mode="CMYK")


def test_nothing_is_decoded_until_asked(tmp_path, monkeypatch):
    root = make_image_folder(tmp_path / "f", per_class=4)
    calls = []
    real = data.image_folder.read_image
    monkeypatch.setattr(data.image_folder, "read_image", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    ds = data.ImageFolder(root)
    assert len(calls) == 1  # the first image, for its mode and size
    ds[5]
    assert len(calls) == 2


def test_corrupt_image_error_names_the_file(tmp_path):
    root = make_image_folder(tmp_path / "f", per_class=2)
    bad = root / "square" / "img000.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 10)
    ds = data.ImageFolder(root)
    i = ds.samples.index((str(bad), 1))
    with pytest.raises(data.DataFormatError, match="img000.png"):
        ds[i]
    assert [k for k, _ in ds.find_bad()] == [i]


def test_bad_folders_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        data.ImageFolder(tmp_path / "missing")
    (tmp_path / "flat").mkdir()
    write_image(tmp_path / "flat" / "x.png", np.zeros((3, 3), np.uint8))
    with pytest.raises(data.DataFormatError, match="no class sub-folders"):
        data.ImageFolder(tmp_path / "flat")
    root = make_image_folder(tmp_path / "f", per_class=1)
    (root / "empty").mkdir()
    (root / "empty" / "readme.txt").write_text("x")
    with pytest.raises(data.DataFormatError, match="no images in the class folder .*empty"):
        data.ImageFolder(root)


def test_validation_folder_uses_the_training_mapping(tmp_path):
    train = data.ImageFolder(make_image_folder(tmp_path / "train", per_class=2))
    make_image_folder(tmp_path / "val", classes=("square",), per_class=1)
    val = data.ImageFolder(tmp_path / "val", class_to_idx=train.class_to_idx)
    assert val.classes == train.classes and val.targets == [1]
    make_image_folder(tmp_path / "val", classes=("hexagon",), per_class=1)
    with pytest.raises(data.DataFormatError, match="hexagon"):
        data.ImageFolder(tmp_path / "val", class_to_idx=train.class_to_idx)


def test_subset_and_stats(tmp_path):
    ds = data.ImageFolder(make_image_folder(tmp_path / "f", per_class=3))
    sub = ds.subset([0, 4])
    assert len(sub) == 2 and sub.samples == [ds.samples[0], ds.samples[4]]
    mean, std = data.dataset_mean_std(ds, batch_size=4)
    x = np.stack([ds[i][0] for i in range(len(ds))])
    m, s = data.channel_mean_std(x)
    np.testing.assert_allclose(mean, m, rtol=1e-5)
    np.testing.assert_allclose(std, s, rtol=1e-5)


def test_stratified_split_keeps_every_class():
    labels = np.repeat([0, 1, 2], [10, 5, 2])
    tr, va = data.stratified_split(labels, 0.2, seed=3)
    assert sorted(np.concatenate([tr, va]).tolist()) == list(range(17))
    assert np.bincount(labels[va]).tolist() == [2, 1, 1]
    tr2, va2 = data.stratified_split(labels, 0.2, seed=3)
    assert va.tolist() == va2.tolist()
    with pytest.raises(ValueError, match="fraction"):
        data.stratified_split(labels, 1.0, 0)


@pytest.mark.parametrize("suffix", [".bmp", ".gif", ".webp", ".tiff", ".jpeg", ".ppm"])
def test_every_listed_format_decodes(tmp_path, suffix):
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in ("a", "b"):
        img = pattern_image(0 if c == "a" else 1, rng, size=8)
        path = tmp_path / "f" / c / f"x{suffix}"
        path.parent.mkdir(parents=True)
        im = Image.fromarray(img)
        (im.convert("P") if suffix == ".gif" else im).save(path)
    ds = data.ImageFolder(tmp_path / "f")
    assert len(ds) == 2 and ds.mode == "RGB"
    x, _ = ds[1]
    assert x.shape == (3, 8, 8) and x.dtype == np.float32
    if suffix in (".bmp", ".tiff", ".ppm"):  # lossless: the very pixels
        np.testing.assert_array_equal(x, img.transpose(2, 0, 1) / np.float32(255))
