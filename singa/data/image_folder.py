"""A folder of images with one sub-folder per class, decoded lazily with Pillow.

The classes and the sample order follow torchvision's ``ImageFolder``: the class names
are the sub-folders' names sorted (so the class-to-index mapping is torchvision's), and
each class folder is walked with ``os.walk`` (links followed, folders and files
sorted). Two differences, both about files torchvision would fail on later: hidden files
and folders (names starting with ``.``) are skipped, and GIF images are accepted.
Files whose extension is not an image's are skipped, as torchvision does.

Every image is converted to one mode (``"RGB"`` or ``"L"``: by default the first
image's, RGB for colour and palette images, L for grayscale), resized with bilinear
filtering to one size (default: the first image's), and returned as float32 (C, H, W)
in [0, 1] with its class index. Nothing is decoded until a sample is asked for, so a
folder larger than memory costs only its list of paths.

Example::

    from singa import data
    train = data.ImageFolder("photos/train")                 # classes from sub-folders
    val = data.ImageFolder("photos/val", class_to_idx=train.class_to_idx,
                           mode=train.mode, image_size=train.image_size)
    x, y = train[0]                                          # (3, H, W) float32, int
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from singa.data.idx import DataFormatError

__all__ = ["IMG_EXTENSIONS", "ImageFolder", "find_classes", "read_image"]

#: the extensions (lower case) of the files taken as images: torchvision's plus GIF
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", ".gif")

#: Pillow modes taken as grayscale when choosing the folder's mode from its first image
_GRAY_MODES = ("1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "F")


def _hidden(name: str) -> bool:
    return name.startswith(".")


def find_classes(root: str | os.PathLike) -> tuple[list[str], dict[str, int]]:
    """The class names (the sub-folders of ``root``, sorted; hidden ones skipped) and
    their indices, as torchvision's ``find_classes``."""
    root = os.fspath(root)
    if not os.path.isdir(root):
        raise FileNotFoundError(f"ImageFolder: {root} is not a folder")
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and not _hidden(e.name))
    if not classes:
        raise DataFormatError(f"ImageFolder: {root} has no class sub-folders (one folder per class)")
    return classes, {c: i for i, c in enumerate(classes)}


def _is_image(name: str) -> bool:
    return not _hidden(name) and name.lower().endswith(IMG_EXTENSIONS)


def _class_files(folder: str) -> list[str]:
    """The image files under ``folder`` in torchvision's order."""
    out = []
    for here, _dirs, names in sorted(os.walk(folder, followlinks=True)):
        if any(_hidden(part) for part in os.path.relpath(here, folder).split(os.sep) if part != "."):
            continue
        out.extend(os.path.join(here, n) for n in sorted(names) if _is_image(n))
    return out


def make_samples(root: str, class_to_idx: dict[str, int], require_all: bool = True) -> list[tuple[str, int]]:
    """(path, class index) of every image under ``root``'s class folders. With
    ``require_all`` every class must have a folder with at least one image."""
    samples: list[tuple[str, int]] = []
    empty = []
    for name in sorted(class_to_idx, key=class_to_idx.__getitem__):
        folder = os.path.join(root, name)
        files = _class_files(folder) if os.path.isdir(folder) else []
        if not files:
            empty.append(folder)
        samples.extend((f, class_to_idx[name]) for f in files)
    if require_all and empty:
        raise DataFormatError(
            f"ImageFolder: no images in the class folder{'s' if len(empty) > 1 else ''} {', '.join(empty)} "
            f"(image extensions: {' '.join(IMG_EXTENSIONS)})"
        )
    if not samples:
        raise DataFormatError(f"ImageFolder: no images under {root}")
    return samples


def read_image(path: str, mode: str | None = None, size: tuple[int, int] | None = None) -> np.ndarray:
    """Decode ``path`` with Pillow (first frame), convert to ``mode`` and resize to
    ``size`` = (H, W) with bilinear filtering; returns uint8 (H, W) for L, (H, W, 3)
    for RGB. A file Pillow cannot read raises :class:`DataFormatError` naming it."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            im.load()
            if mode is not None and im.mode != mode:
                im = im.convert(mode)
            if size is not None and im.size != (size[1], size[0]):
                im = im.resize((size[1], size[0]), Image.Resampling.BILINEAR)
            return np.asarray(im, dtype=np.uint8)
    except (OSError, ValueError, SyntaxError) as e:  # Pillow's errors for bad files
        raise DataFormatError(f"cannot read the image {path}: {e}") from None


def _probe(path: str) -> tuple[str, tuple[int, int]]:
    """The mode ("RGB" or "L") and (H, W) of an image, decoding it to be sure it reads."""
    from PIL import Image

    read_image(path)
    with Image.open(path) as im:
        return ("L" if im.mode in _GRAY_MODES else "RGB"), (im.size[1], im.size[0])


class ImageFolder:
    """Images in ``root/<class>/...`` as ``(x, class index)`` samples, decoded on demand.

    Args:
        root: the folder holding one sub-folder per class.
        mode: "RGB" or "L" (None: the first image's).
        image_size: (H, W) or one int for square images (None: the first image's size).
        class_to_idx: a given class-to-index mapping (e.g. the training folder's, for a
            validation folder): class folders of ``root`` not in it are an error, and
            classes without a folder or without images are allowed.

    Attributes:
        classes, class_to_idx, samples (list of (path, index)), targets, mode,
        image_size, channels.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        mode: str | None = None,
        image_size: int | Sequence[int] | None = None,
        class_to_idx: dict[str, int] | None = None,
    ):
        self.root = os.fspath(root)
        if class_to_idx is None:
            self.classes, self.class_to_idx = find_classes(self.root)
            self.samples = make_samples(self.root, self.class_to_idx)
        else:
            found, _ = find_classes(self.root)
            unknown = [c for c in found if c not in class_to_idx]
            if unknown:
                raise DataFormatError(
                    f"ImageFolder: {self.root} has class folders not among the known classes: "
                    + ", ".join(unknown)
                )
            self.class_to_idx = dict(class_to_idx)
            self.classes = sorted(self.class_to_idx, key=self.class_to_idx.__getitem__)
            self.samples = make_samples(self.root, self.class_to_idx, require_all=False)
        if mode is not None and mode not in ("RGB", "L"):
            raise ValueError(f"ImageFolder: mode must be 'RGB' or 'L', got {mode!r}")
        size = None if image_size is None else _pair(image_size)
        if mode is None or size is None:
            first_mode, first_size = _probe(self.samples[0][0])
            mode = mode or first_mode
            size = size or first_size
        self.mode: str = mode
        self.image_size: tuple[int, int] = size

    @property
    def targets(self) -> list[int]:
        """The class index of every sample."""
        return [t for _, t in self.samples]

    @property
    def channels(self) -> int:
        """3 for RGB, 1 for L."""
        return 3 if self.mode == "RGB" else 1

    def __len__(self) -> int:
        """Number of images."""
        return len(self.samples)

    def load(self, i: int) -> np.ndarray:
        """Image ``i`` as uint8 (C, H, W)."""
        arr = read_image(self.samples[i][0], self.mode, self.image_size)
        return arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        """``(image float32 (C, H, W) in [0, 1], class index)``."""
        return self.load(i).astype(np.float32) / np.float32(255), self.samples[i][1]

    def get_batch(self, indices: Any) -> tuple[np.ndarray, np.ndarray]:
        """The images at ``indices`` as float32 (B, C, H, W) in [0, 1] and int32 labels."""
        idx = [int(i) for i in np.asarray(indices).reshape(-1)]
        out = np.empty((len(idx), self.channels, *self.image_size), np.uint8)
        for k, i in enumerate(idx):
            out[k] = self.load(i)
        y = np.array([self.samples[i][1] for i in idx], np.int32)
        return out.astype(np.float32) / np.float32(255), y

    def subset(self, indices: Any) -> ImageFolder:
        """The same folder restricted to the samples at ``indices`` (nothing decoded)."""
        other = copy.copy(self)
        other.samples = [self.samples[int(i)] for i in np.asarray(indices).reshape(-1)]
        return other

    def find_bad(self) -> list[tuple[int, str]]:
        """Decode every image once; returns (index, reason) of those that fail."""
        bad = []
        for i, (path, _) in enumerate(self.samples):
            try:
                read_image(path)
            except DataFormatError as e:
                bad.append((i, str(e)))
        return bad

    def __repr__(self) -> str:
        h, w = self.image_size
        return (
            f"ImageFolder({self.root!r}, {len(self)} images, {len(self.classes)} classes, "
            f"{self.mode} {h}x{w})"
        )


def _pair(size: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(size, int | np.integer):
        size = (int(size), int(size))
    h, w = (int(v) for v in size)
    if h < 1 or w < 1:
        raise ValueError(f"ImageFolder: image_size must be positive, got {size}")
    return h, w
