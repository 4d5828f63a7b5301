"""Image augmentation on Pillow images (SINGA's ``image_tool``), plus the same random
crop and flip for batches of arrays (``singa-train --augment``).

Functions take a PIL image and return a new one; :class:`ImageTool` holds a list of
images and chains operations (``inplace=True`` returns the tool, ``False`` the new
images). Operations with a ``num_case`` produce that many variants of each image
(1 for training, the maximum for test-time augmentation). Randomness comes from the
``rng`` argument (a :class:`random.Random`), by default the tool's own generator
(``ImageTool(seed=0)`` makes a run repeatable) or Python's global one for the functions.

Example::

    from singa import image_tool
    tool = image_tool.ImageTool(seed=0)
    imgs = tool.load("cat.jpg").resize_by_range((112, 128)).random_crop((96, 96)).flip().get()

Needs Pillow (``pip install singa[image]``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "ImageTool",
    "augment_batch",
    "color_cast",
    "crop",
    "crop_and_resize",
    "enhance",
    "flip",
    "flip_down",
    "get_list_sample",
    "load_img",
    "random_crop_offset",
    "resize",
    "resize_by_hw",
    "scale",
]

_CORNER_POSITIONS = ("left_top", "left_bottom", "right_top", "right_bottom", "center")
_SQUARE_POSITIONS = {"horizontal": ("left", "center", "right"), "vertical": ("top", "middle", "bottom")}


def _pil() -> Any:
    try:
        from PIL import Image, ImageEnhance
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ImportError("singa.image_tool needs Pillow: pip install singa[image]") from e
    return Image, ImageEnhance


def load_img(path: str, grayscale: bool = False) -> Any:
    """Open an image file as RGB (or as one grey channel with ``grayscale``)."""
    image, _ = _pil()
    with image.open(path) as img:
        return img.convert("L" if grayscale else "RGB")


def _corner_box(size: tuple, patch: Sequence[int], position: str) -> tuple[int, int]:
    """Top-left corner of a ``patch`` (width, height) placed at ``position`` in ``size``."""
    (w, h), (pw, ph) = size, patch
    offsets = {
        "left_top": (0, 0),
        "left_bottom": (0, h - ph),
        "right_top": (w - pw, 0),
        "right_bottom": (w - pw, h - ph),
        "center": ((w - pw) // 2, (h - ph) // 2),
    }
    if position not in offsets:
        raise ValueError(f"crop: position must be one of {_CORNER_POSITIONS}, got {position!r}")
    return offsets[position]


def _check_fits(size: tuple, patch: Sequence[int], what: str) -> None:
    if size[0] < patch[0] or size[1] < patch[1]:
        raise ValueError(
            f"{what}: the image ({size[0]}x{size[1]}) is smaller than the patch ({patch[0]}x{patch[1]})"
        )


def crop(img: Any, patch: Sequence[int], position: str) -> Any:
    """Cut a ``patch`` (width, height) at ``position``: left_top, left_bottom, right_top,
    right_bottom or center."""
    _check_fits(img.size, patch, "crop")
    left, top = _corner_box(img.size, patch, position)
    return img.crop((left, top, left + patch[0], top + patch[1]))


def _square_box(size: tuple, position: str) -> tuple[int, int, int, int]:
    """The largest square at ``position`` (left/center/right or top/middle/bottom)."""
    w, h = size
    boxes = {
        "left": (0, 0, h, h),
        "center": ((w - h) // 2, 0, (w + h) // 2, h),
        "right": (w - h, 0, w, h),
        "top": (0, 0, w, w),
        "middle": (0, (h - w) // 2, w, (h + w) // 2),
        "bottom": (0, h - w, w, h),
    }
    if position not in boxes:
        raise ValueError(f"crop_and_resize: position must be one of {sorted(boxes)}, got {position!r}")
    return boxes[position]


def crop_and_resize(img: Any, patch: Sequence[int], position: str) -> Any:
    """Cut the largest square at ``position`` and resize it to ``patch`` (width, height)."""
    image, _ = _pil()
    return img.crop(_square_box(img.size, position)).resize(tuple(patch), image.BILINEAR)


def resize(img: Any, small_size: int) -> Any:
    """Resize keeping the aspect ratio so that the shorter side is ``small_size``."""
    image, _ = _pil()
    w, h = img.size
    new = (small_size, int(small_size * h / w)) if w < h else (int(small_size * w / h), small_size)
    return img.resize(new, image.BILINEAR)


def scale(img: Any, small_size: int) -> Any:
    """Same as :func:`resize`."""
    return resize(img, small_size)


def resize_by_hw(img: Any, size: Sequence[int]) -> Any:
    """Resize to (height, width) = ``size``."""
    return img.resize((size[1], size[0]))


def color_cast(img: Any, offset: int, rng: random.Random | None = None) -> Any:
    """Shift each RGB channel, with probability 1/2, by a random integer in
    [-offset, offset] (values clipped to 0..255)."""
    image, _ = _pil()
    rng = rng or random
    shift = [rng.randint(-offset, offset) if rng.randint(0, 1) else 0 for _ in range(3)]
    x = np.asarray(img.convert("RGB"), dtype=np.int16) + np.array(shift, np.int16)
    return image.fromarray(np.clip(x, 0, 255).astype(np.uint8), "RGB")


def enhance(img: Any, scale: float, rng: random.Random | None = None) -> Any:
    """Change colour, contrast, brightness and sharpness, each with probability 1/2,
    by a random factor in [1 - scale, 1 + scale]."""
    _, image_enhance = _pil()
    rng = rng or random
    for kind in (
        image_enhance.Color,
        image_enhance.Contrast,
        image_enhance.Brightness,
        image_enhance.Sharpness,
    ):
        if rng.randint(0, 1):
            img = kind(img).enhance(rng.uniform(1 - scale, 1 + scale))
    return img


def flip(img: Any) -> Any:
    """Mirror left to right."""
    image, _ = _pil()
    return img.transpose(image.FLIP_LEFT_RIGHT)


def flip_down(img: Any) -> Any:
    """Mirror top to bottom."""
    image, _ = _pil()
    return img.transpose(image.FLIP_TOP_BOTTOM)


def get_list_sample(items: Sequence[Any], sample_size: int, rng: random.Random | None = None) -> list:
    """``sample_size`` distinct items, in their original order."""
    rng = rng or random
    return [items[i] for i in sorted(rng.sample(range(len(items)), sample_size))]


def random_crop_offset(size: Sequence[int], patch: Sequence[int], rng: Any) -> tuple[int, int]:
    """A uniformly random top-left corner for a ``patch`` inside ``size`` (both (w, h) or
    (h, w), matched per axis); ``rng`` has ``randint(a, b)`` inclusive (random.Random)
    or ``integers(a, b)`` exclusive (numpy Generator)."""
    _check_fits(tuple(size), patch, "random_crop")
    if hasattr(rng, "integers"):
        return int(rng.integers(0, size[0] - patch[0] + 1)), int(rng.integers(0, size[1] - patch[1] + 1))
    return rng.randint(0, size[0] - patch[0]), rng.randint(0, size[1] - patch[1])


def augment_batch(x: np.ndarray, rng: np.random.Generator, padding: int | None = None) -> np.ndarray:
    """Random crop + horizontal flip of a batch (N, C, H, W), each sample independently.

    Each sample is zero-padded by ``padding`` pixels (default H // 8, 4 for 32x32) on
    every side, a random H x W window of it is kept (:func:`random_crop_offset`), and it
    is mirrored left to right with probability 1/2. Returns a new array.
    """
    if x.ndim != 4:
        raise ValueError(f"augment_batch: expected a batch (N, C, H, W), got shape {x.shape}")
    n, _, h, w = x.shape
    pad = max(h // 8, 1) if padding is None else int(padding)
    if pad < 0:
        raise ValueError(f"augment_batch: padding must not be negative, got {pad}")
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.empty_like(x)
    for i in range(n):
        top, left = random_crop_offset((h + 2 * pad, w + 2 * pad), (h, w), rng)
        window = padded[i, :, top : top + h, left : left + w]
        out[i] = window[:, :, ::-1] if rng.random() < 0.5 else window
    return out


class ImageTool:
    """A list of images and chainable augmentations (see the module docstring).

    Args:
        seed: seeds the tool's random generator (None: unpredictable).
    """

    def __init__(self, seed: int | None = None):
        self.imgs: list = []
        self.rng = random.Random(seed)

    # ----- the image list -----------------------------------------------------------------
    def load(self, path: str, grayscale: bool = False) -> ImageTool:
        """Replace the list with the image at ``path``."""
        self.imgs = [load_img(path, grayscale)]
        return self

    def set(self, imgs: list) -> ImageTool:
        """Replace the list with ``imgs``."""
        self.imgs = list(imgs)
        return self

    def append(self, img: Any) -> ImageTool:
        """Add one image to the list."""
        self.imgs.append(img)
        return self

    def get(self) -> list:
        """The current images."""
        return self.imgs

    def _done(self, new_imgs: list, inplace: bool) -> Any:
        if inplace:
            self.imgs = new_imgs
            return self
        return new_imgs

    def _variants(self, choices: Sequence[Any], num_case: int, what: str) -> list:
        """``num_case`` of ``choices`` (all of them when num_case is their number)."""
        if not 1 <= num_case <= len(choices):
            raise ValueError(f"{what}: num_case must be in [1, {len(choices)}], got {num_case}")
        return list(choices) if num_case == len(choices) else get_list_sample(choices, num_case, self.rng)

    def _each(self, choices: Sequence[Any], num_case: int, what: str, fn: Any, inplace: bool) -> Any:
        new = [fn(img, c) for img in self.imgs for c in self._variants(choices, num_case, what)]
        return self._done(new, inplace)

    # ----- resizing and rotation ------------------------------------------------------------
    def resize_by_list(self, size_list: Sequence[int], num_case: int = 1, inplace: bool = True) -> Any:
        """Resize each image so its shorter side is one (or ``num_case``) of ``size_list``."""
        return self._each(list(size_list), num_case, "resize_by_list", resize, inplace)

    def resize_by_range(self, rng: Sequence[int], inplace: bool = True) -> Any:
        """Resize each image so its shorter side is a random size in [rng[0], rng[1])."""
        return self.resize_by_list(list(range(rng[0], rng[1])), 1, inplace)

    def scale_by_list(self, size_list: Sequence[int], num_case: int = 1, inplace: bool = True) -> Any:
        """Same as :meth:`resize_by_list`."""
        return self.resize_by_list(size_list, num_case, inplace)

    def scale_by_range(self, rng: Sequence[int], inplace: bool = True) -> Any:
        """Same as :meth:`resize_by_range`."""
        return self.resize_by_range(rng, inplace)

    def resize_by_hw_list(
        self, size_list: Sequence[Sequence[int]], num_case: int = 1, inplace: bool = True
    ) -> Any:
        """Resize each image to one (or ``num_case``) of the (height, width) pairs."""
        return self._each(list(size_list), num_case, "resize_by_hw_list", resize_by_hw, inplace)

    def resize_by_hw_range(self, rng: Sequence[Sequence[int]], inplace: bool = True) -> Any:
        """Resize to a random (height, width) taken pairwise from two ranges of equal length."""
        heights, widths = range(rng[0][0], rng[0][1]), range(rng[1][0], rng[1][1])
        if len(heights) != len(widths):
            raise ValueError("resize_by_hw_range: the height and width ranges must have the same length")
        return self.resize_by_hw_list(list(zip(heights, widths)), 1, inplace)

    def rotate_by_list(self, angle_list: Sequence[float], num_case: int = 1, inplace: bool = True) -> Any:
        """Rotate each image by one (or ``num_case``) of the angles (degrees, counter-clockwise)."""
        return self._each(list(angle_list), num_case, "rotate_by_list", lambda img, a: img.rotate(a), inplace)

    def rotate_by_range(self, rng: Sequence[int], inplace: bool = True) -> Any:
        """Rotate each image by a random whole angle in [rng[0], rng[1]) degrees."""
        return self.rotate_by_list(list(range(rng[0], rng[1])), 1, inplace)

    # ----- crops ---------------------------------------------------------------------------
    def crop5(self, patch: Sequence[int], num_case: int = 1, inplace: bool = True) -> Any:
        """Crop ``patch`` (width, height) at one (or ``num_case``) of the four corners and the centre."""
        return self._each(_CORNER_POSITIONS, num_case, "crop5", lambda img, p: crop(img, patch, p), inplace)

    def crop3(self, patch: Sequence[int], num_case: int = 1, inplace: bool = True) -> Any:
        """Resize to the square ``patch`` the largest square at one (or ``num_case``) of three
        positions along the image's longer side."""
        if patch[0] != patch[1]:
            raise ValueError(f"crop3: patch must be a square, got {tuple(patch)}")
        new = []
        for img in self.imgs:
            axis = "horizontal" if img.size[0] > img.size[1] else "vertical"
            for pos in self._variants(_SQUARE_POSITIONS[axis], num_case, "crop3"):
                new.append(crop_and_resize(img, patch, pos))
        return self._done(new, inplace)

    def crop8(self, patch: Sequence[int], num_case: int = 1, inplace: bool = True) -> Any:
        """``num_case`` of the 8 crops of :meth:`crop5` and :meth:`crop3` together."""
        picks = self._variants(range(8), num_case, "crop8")
        n5 = sum(1 for p in picks if p < 5)
        new = (self.crop5(patch, n5, False) if n5 else []) + (
            self.crop3(patch, num_case - n5, False) if num_case > n5 else []
        )
        return self._done(new, inplace)

    def random_crop(self, patch: Sequence[int], inplace: bool = True) -> Any:
        """Crop ``patch`` (width, height) at a random position of each image."""
        new = []
        for img in self.imgs:
            left, top = random_crop_offset(img.size, patch, self.rng)
            new.append(img.crop((left, top, left + patch[0], top + patch[1])))
        return self._done(new, inplace)

    def random_crop_resize(self, patch: Sequence[int], inplace: bool = True) -> Any:
        """Crop 8%-100% of the area with an aspect ratio in [3/4, 4/3] at a random place and
        resize it to ``patch`` (the whole image after 10 failed attempts)."""
        image, _ = _pil()
        new = []
        for img in self.imgs:
            box = self._random_area_box(img.size)
            src = img if box is None else img.crop(box)
            new.append(src.resize(tuple(patch), image.BILINEAR))
        return self._done(new, inplace)

    def _random_area_box(self, size: tuple) -> tuple | None:
        w, h = size
        for _ in range(10):
            area = self.rng.uniform(0.08, 1.0) * w * h
            ratio = self.rng.uniform(3 / 4, 4 / 3)
            cw, ch = int(round(math.sqrt(area * ratio))), int(round(math.sqrt(area / ratio)))
            if w > cw and h > ch:
                left, top = self.rng.randint(0, w - cw), self.rng.randint(0, h - ch)
                return left, top, left + cw, top + ch
        return None

    # ----- flips and colours -----------------------------------------------------------------
    def _flips(self, fn: Any, num_case: int, what: str, inplace: bool) -> Any:
        if num_case not in (1, 2):
            raise ValueError(f"{what}: num_case must be 1 or 2, got {num_case}")
        new = []
        for img in self.imgs:
            if num_case == 2:
                new += [fn(img), img]
            else:
                new.append(fn(img) if self.rng.randint(0, 1) else img)
        return self._done(new, inplace)

    def flip(self, num_case: int = 1, inplace: bool = True) -> Any:
        """Mirror left to right with probability 1/2 (num_case 1) or add the mirrored image (2)."""
        return self._flips(flip, num_case, "flip", inplace)

    def flip_down(self, num_case: int = 1, inplace: bool = True) -> Any:
        """Mirror top to bottom with probability 1/2 (num_case 1) or add the mirrored image (2)."""
        return self._flips(flip_down, num_case, "flip_down", inplace)

    def color_cast(self, offset: int = 20, inplace: bool = True) -> Any:
        """:func:`color_cast` each image (``offset`` in [0, 255])."""
        if not 0 <= offset <= 255:
            raise ValueError(f"color_cast: offset must be in [0, 255], got {offset}")
        return self._done([color_cast(img, offset, self.rng) for img in self.imgs], inplace)

    def enhance(self, scale: float = 0.2, inplace: bool = True) -> Any:
        """:func:`enhance` each image."""
        return self._done([enhance(img, scale, self.rng) for img in self.imgs], inplace)
