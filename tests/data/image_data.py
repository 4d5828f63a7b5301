"""Small image folders and tables for the data tests and the command-line tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def pattern_image(label: int, rng: np.random.Generator, size: int = 12, channels: int = 3) -> np.ndarray:
    """A uint8 image whose class shows only in its pixels: class 0 has a bright left
    half, class 1 a bright top half, class 2 a bright centre (plus noise)."""
    img = rng.integers(0, 90, size=(size, size, channels)).astype(np.int32)
    h = size // 2
    if label % 3 == 0:
        img[:, :h] += 150
    elif label % 3 == 1:
        img[:h, :] += 150
    else:
        img[size // 4 : size - size // 4, size // 4 : size - size // 4] += 150
    img = np.clip(img, 0, 255).astype(np.uint8)
    return img[:, :, 0] if channels == 1 else img


def write_image(path: Path, img: np.ndarray) -> None:
    """Save ``img`` (H, W) or (H, W, 3) uint8 with Pillow (format from the suffix)."""
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    kw = {"quality": 95} if path.suffix.lower() in (".jpg", ".jpeg") else {}
    Image.fromarray(img).save(path, **kw)


def make_image_folder(
    root: Path,
    classes: tuple[str, ...] = ("circle", "square", "triangle"),
    per_class: int = 8,
    size: int = 12,
    channels: int = 3,
    seed: int = 0,
    suffixes: tuple[str, ...] = (".png", ".jpg"),
    patterns: tuple[int, ...] | None = None,
) -> Path:
    """``root/<class>/img<k><suffix>`` images of :func:`pattern_image` (class ``c`` gets
    pattern ``patterns[c]``, default ``c``), alternating suffixes."""
    rng = np.random.default_rng(seed)
    for c, name in enumerate(classes):
        pattern = c if patterns is None else patterns[c]
        for k in range(per_class):
            suffix = suffixes[k % len(suffixes)]
            write_image(root / name / f"img{k:03d}{suffix}", pattern_image(pattern, rng, size, channels))
    return root


def make_table(n: int = 120, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Features (n, 4) and labels in {0, 1, 2} given by the sign of two features."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4))
    y = (x[:, 0] > 0).astype(int) + (x[:, 1] > 0.5).astype(int)
    return x, y
