"""Your own data by a spec string: ``imagefolder:DIR`` (or a folder), ``npz:FILE``,
``csv:FILE``; both splits, the class names and the training split's normalisation.

- ``imagefolder:DIR``: ``DIR/train`` and ``DIR/val`` (or ``DIR/test``) when present,
  else ``DIR`` itself with a stratified validation split (``val_split``, drawn with
  ``seed``). See :class:`~singa.data.ImageFolder` for the class order and decoding.
- ``npz:FILE``: ``x_train``, ``y_train`` and optionally ``x_val``/``y_val`` (or
  ``x_test``/``y_test``), or ``x``, ``y`` split by ``val_split``; optional
  ``class_names``. uint8 samples are scaled to [0, 1]; (N, H, W) gains a channel axis.
  Read without pickle.
- ``csv:FILE``: see :class:`~singa.data.CSVDataset` (``target``, ``task``).

Normalisation: per-channel (per-feature for tables) mean and standard deviation of the
training split (of at most ``stats_limit`` images drawn with ``seed`` for folders).

Example::

    from singa import data
    ud = data.load_user_data("imagefolder:photos", val_split=0.2, seed=0)
    loader = data.DataLoader(ud.x_train, batch_size=32, shuffle=True, mean=ud.mean, std=ud.std)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from singa.data.csv_dataset import CSVDataset
from singa.data.dataset import ArrayDataset, stratified_split
from singa.data.datasets import DatasetInfo
from singa.data.idx import DataFormatError
from singa.data.image_folder import ImageFolder
from singa.data.loader import channel_mean_std, dataset_mean_std

__all__ = ["SPEC_KINDS", "UserData", "as_samples", "load_user_data", "parse_data_spec"]

SPEC_KINDS = ("imagefolder", "npz", "csv")


def parse_data_spec(text: str) -> tuple[str, str] | None:
    """``(kind, path)`` of a user-data spec, or None for anything else (a registry name).
    ``kind:PATH`` with a kind of :data:`SPEC_KINDS`; a bare path is a spec when it is an
    existing folder (imagefolder) or ends in ``.npz`` or ``.csv``."""
    text = str(text)
    kind, sep, path = text.partition(":")
    if sep and kind.lower() in SPEC_KINDS:
        return kind.lower(), os.path.expanduser(path)
    if os.path.isdir(os.path.expanduser(text)):
        return "imagefolder", os.path.expanduser(text)
    if text.lower().endswith(".npz"):
        return "npz", os.path.expanduser(text)
    if text.lower().endswith(".csv"):
        return "csv", os.path.expanduser(text)
    return None


@dataclass
class UserData:
    """Both splits of user data, read like :class:`singa.data.Dataset`: ``x_train`` and
    ``x_test`` are datasets (``y_train``, ``y_test`` None), ``info`` describes them,
    ``mean``/``std`` normalise them, ``skipped`` lists unreadable files left out."""

    x_train: Any
    x_test: Any
    info: DatasetInfo
    mean: np.ndarray
    std: np.ndarray
    task: str = "classification"
    skipped: list = field(default_factory=list)
    y_train: None = None
    y_test: None = None

    @property
    def x_val(self) -> Any:
        """Alias of ``x_test`` (the validation split)."""
        return self.x_test


def load_user_data(
    spec: str,
    val_split: float = 0.1,
    seed: int = 0,
    channels: int | None = None,
    image_size: Any = None,
    target: str | None = None,
    task: str = "classification",
    skip_bad: bool = False,
    workers: int = 0,
    stats_limit: int = 5000,
    stats: bool = True,
    class_names: Sequence[str] | None = None,
) -> UserData:
    """Load the data named by ``spec`` (see the module's description). Bad data raises
    :class:`DataFormatError` (a ``ValueError``) or ``FileNotFoundError`` naming the file.
    ``stats=False`` skips the image statistics pass (``mean`` 0, ``std`` 1: for callers
    that have the training run's normalisation). ``class_names`` imposes a model's
    classes (a folder or label not among them is an error; some may be absent)."""
    parsed = parse_data_spec(spec)
    if parsed is None:
        raise ValueError(f"{spec!r} is not a data spec (imagefolder:DIR, npz:FILE or csv:FILE)")
    kind, path = parsed
    if kind != "imagefolder" and not os.path.isfile(path):
        raise FileNotFoundError(f"{kind} data file not found: {path}")
    if kind == "imagefolder":
        known = None if class_names is None else {c: i for i, c in enumerate(class_names)}
        folder = _FolderOptions(mode=_mode(channels), size=image_size, skip_bad=skip_bad, known=known)
        return _image_folder(spec, path, val_split, seed, folder, workers, stats_limit if stats else 0)
    if kind == "npz":
        return _arrays(spec, path, _read_npz(path, val_split, seed, class_names), "classification")
    table = CSVDataset(path, target=target, task=task, class_names=class_names)
    if task == "regression":
        tr, va = _random_split(len(table), val_split, seed)
    else:
        tr, va = stratified_split(table.y, val_split, seed)
    _need_classes(table.class_names, path, task)
    return _arrays(spec, path, (table.subset(tr), table.subset(va), table.class_names), task)


def _need_classes(class_names: Any, path: str, task: str) -> None:
    if task == "classification" and class_names is not None and len(class_names) < 2:
        raise DataFormatError(
            f"{path}: only one class ({class_names[0]!r}); a classifier needs at least two classes"
        )


def _random_split(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if not 0.0 <= float(fraction) < 1.0:
        raise ValueError(f"the validation fraction must be in [0, 1), got {fraction}")
    perm = np.random.default_rng(int(seed)).permutation(n)
    k = int(round(fraction * n))
    return np.sort(perm[k:]), np.sort(perm[:k])


def _mode(channels: int | None) -> str | None:
    if channels is None:
        return None
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 (grayscale) or 3 (RGB), got {channels}")
    return "L" if channels == 1 else "RGB"


def _split_folders(path: str) -> tuple[str, str | None] | None:
    train = os.path.join(path, "train")
    if not os.path.isdir(train):
        return None
    for name in ("val", "test"):
        if os.path.isdir(os.path.join(path, name)):
            return train, os.path.join(path, name)
    return train, None


def _drop_bad(ds: ImageFolder, skipped: list) -> ImageFolder:
    bad = ds.find_bad()
    if not bad:
        return ds
    skipped.extend(reason for _, reason in bad)
    gone = {i for i, _ in bad}
    return ds.subset([i for i in range(len(ds)) if i not in gone])


@dataclass
class _FolderOptions:
    mode: str | None = None
    size: Any = None
    skip_bad: bool = False
    known: dict | None = None  # a model's class-to-index mapping to impose


def _image_folder(
    spec: str, path: str, val_split: float, seed: int, opts: _FolderOptions, workers: int, stats_limit: int
) -> UserData:
    split = _split_folders(path)
    skipped: list = []
    val = None
    train = ImageFolder(split[0] if split else path, opts.mode, opts.size, class_to_idx=opts.known)
    if split is not None and split[1] is not None:
        val = ImageFolder(split[1], train.mode, train.image_size, class_to_idx=train.class_to_idx)
    _need_classes(train.classes, train.root, "classification")
    if opts.skip_bad:
        train = _drop_bad(train, skipped)
        val = None if val is None else _drop_bad(val, skipped)
    if val is None:
        tr, va = stratified_split(train.targets, val_split, seed)
        train, val = train.subset(tr), train.subset(va)
    if stats_limit > 0:
        mean, std = dataset_mean_std(train, max_samples=stats_limit, seed=seed, workers=workers)
        std = np.where(std > 0, std, np.float32(1)).astype(np.float32)
    else:
        mean, std = np.zeros(train.channels, np.float32), np.ones(train.channels, np.float32)
    info = DatasetInfo(
        spec,
        len(train.classes),
        train.channels,
        train.image_size,
        tuple(train.classes),
        ("train", "val"),
        path,
    )
    return UserData(train, val, info, mean, std, "classification", skipped)


def _arrays(spec: str, path: str, parts: tuple, task: str) -> UserData:
    train, val, class_names = parts
    if len(train) == 0:
        raise DataFormatError(f"{path}: no training samples")
    mean, std = channel_mean_std(train.x)
    std = np.where(std > 0, std, np.float32(1)).astype(np.float32)
    shape = train.x.shape[1:]
    classes = 1 if task == "regression" else len(class_names)
    info = DatasetInfo(
        spec,
        classes,
        int(shape[0]),
        tuple(int(s) for s in shape[1:]),
        tuple(class_names or ()),
        ("train", "val"),
        path,
    )
    return UserData(train, val, info, mean, std, task)


def _npz_arrays(path: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except ValueError as e:  # object arrays need pickle: refused
        raise DataFormatError(f"{path}: cannot read the npz file without pickle ({e})") from None
    except (OSError, EOFError) as e:
        raise DataFormatError(f"{path}: not a readable npz file ({e})") from None


def as_samples(x: np.ndarray, path: str, key: str) -> np.ndarray:
    """Samples of an npz array as the loaders give them: float32, uint8 scaled to
    [0, 1], (N, H, W) with a channel axis added; NaN or non-numeric arrays raise
    :class:`DataFormatError` naming ``path`` and ``key``."""
    if x.ndim < 2 or x.dtype.kind not in "uif":
        raise DataFormatError(f"{path}: {key} must be a numeric array (N, ...), got {x.dtype} {x.shape}")
    if x.dtype.kind == "f" and not np.all(np.isfinite(x)):
        bad = int(np.argwhere(~np.isfinite(x.reshape(len(x), -1)))[0, 0])
        raise DataFormatError(f"{path}: {key} has missing or infinite values (first in sample {bad})")
    out = x.astype(np.float32) / np.float32(255) if x.dtype == np.uint8 else x.astype(np.float32)
    return out[:, None] if out.ndim == 3 else out


def _labels(y: np.ndarray, n: int, path: str, key: str) -> np.ndarray:
    if y.ndim != 1 or len(y) != n:
        raise DataFormatError(f"{path}: {key} must have shape ({n},), got {y.shape}")
    if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
        raise DataFormatError(f"{path}: {key} has missing values")
    if y.dtype.kind not in "uif" or not np.all(y == np.round(y)) or (len(y) and y.min() < 0):
        raise DataFormatError(f"{path}: {key} must hold class indices 0, 1, 2, ...")
    return y.astype(np.int32)


def _read_npz(path: str, val_split: float, seed: int, class_names: Sequence[str] | None = None) -> tuple:
    z = _npz_arrays(path)
    if "x_train" in z and "y_train" in z:
        vx = next((k for k in ("x_val", "x_test") if k in z), None)
        xtr = as_samples(z["x_train"], path, "x_train")
        ytr = _labels(z["y_train"], len(xtr), path, "y_train")
        if vx is not None:
            vy = "y" + vx[1:]
            if vy not in z:
                raise DataFormatError(f"{path}: has {vx} but no {vy}")
            xva = as_samples(z[vx], path, vx)
            yva = _labels(z[vy], len(xva), path, vy)
            train, val = ArrayDataset(xtr, ytr), ArrayDataset(xva, yva)
        else:
            train, val = _split(ArrayDataset(xtr, ytr), val_split, seed)
    elif "x" in z and "y" in z:
        x = as_samples(z["x"], path, "x")
        train, val = _split(ArrayDataset(x, _labels(z["y"], len(x), path, "y")), val_split, seed)
    else:
        raise DataFormatError(f"{path}: needs arrays x_train and y_train (or x and y); it has {', '.join(z)}")
    if train.x.shape[1:] != val.x.shape[1:]:
        raise DataFormatError(f"{path}: training samples {train.x.shape[1:]} and validation samples differ")
    k = int(max(train.y.max(initial=0), val.y.max(initial=0))) + 1
    names = tuple(str(c) for c in z["class_names"]) if "class_names" in z else tuple(str(i) for i in range(k))
    names = tuple(class_names) if class_names is not None else names
    if len(names) < k:
        raise DataFormatError(f"{path}: {len(names)} class_names for labels up to {k - 1}")
    _need_classes(names, path, "classification")
    return train, val, names


def _split(ds: ArrayDataset, fraction: float, seed: int) -> tuple[ArrayDataset, ArrayDataset]:
    tr, va = stratified_split(ds.y, fraction, seed)
    return ds.subset(tr), ds.subset(va)
