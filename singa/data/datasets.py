"""Dataset registry: MNIST, Fashion-MNIST, Fashion-MNIST-mini (embedded), CIFAR-10, synthetic.

Every loader returns pixels as float32 in [0, 1] shaped (N, C, H, W) and labels as
int32. Files are looked for, in order, in

1. ``data_dir`` (the CLI's ``--data-dir``), ``data_dir/<name>`` (and torchvision's
   ``data_dir/MNIST/raw``, ``data_dir/FashionMNIST/raw``);
2. the cache folder ``$SINGA_DATA/<name>`` (default ``~/.cache/singa/<name>``);
3. for Fashion-MNIST, the Debian package ``dataset-fashion-mnist``
   (``/usr/share/datasets/fashion-mnist``);
4. a download from the dataset's canonical mirror into the cache folder, checked
   against the published SHA-256, with a progress bar;

and failing all of these a :class:`DatasetNotFoundError` says where it looked and how
to get the files. Files found on disk are checked against the published checksums too
(``verify=False`` skips that). IDX files may be gzip-compressed or not.

``fashion-mnist-mini`` needs no network and no files: it is the original Fashion-MNIST
test split (10,000 images, MIT licence, shipped in ``singa/data/embedded``) split into
8,000 training and 2,000 validation images by a fixed stratified rule (every fifth
image of each class, in file order, goes to validation: 800/200 per class).

Example::

    from singa import data
    x_train, y_train, x_val, y_val = data.load("fashion-mnist-mini")
    info = data.dataset_info("fashion-mnist-mini")     # num_classes=10, (1, 28, 28), class names
    x, y = data.load_dataset("mnist", split="test", data_dir="~/datasets")
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from singa.data.cifar import read_cifar10_archive, read_cifar10_dir
from singa.data.download import CACHE_ENV, ChecksumError, DownloadError, cache_dir, download_file, file_digest
from singa.data.idx import DataFormatError, decompress, read_idx
from singa.data.sources import (
    CIFAR10_ARCHIVE,
    CIFAR10_CLASSES,
    FASHION_MNIST,
    FASHION_MNIST_CLASSES,
    REMOTES,
    RemoteFile,
)

__all__ = [
    "Dataset",
    "DatasetInfo",
    "DatasetNotFoundError",
    "RemoteFile",
    "available_datasets",
    "dataset_info",
    "load",
    "load_dataset",
    "locate_files",
]

#: Where the Debian package ``dataset-fashion-mnist`` installs the four IDX files.
DEBIAN_FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
#: The Fashion-MNIST test split shipped inside the package.
EMBEDDED_DIR = Path(__file__).resolve().parent / "embedded"


class DatasetNotFoundError(FileNotFoundError):
    """The dataset's files are nowhere to be found and could not be downloaded."""


@dataclass(frozen=True)
class DatasetInfo:
    """What a dataset is: classes, channels, image size, class names, split names.

    Attributes:
        name: the registry name (e.g. ``"fashion-mnist-mini"``).
        num_classes: number of classes; labels are 0..num_classes-1.
        num_channels: C in (N, C, H, W).
        image_size: (H, W) (for synthetic data, the sample shape after the channel axis).
        class_names: one name per class.
        splits: (training split, held-out split): ("train", "test") or ("train", "val").
        source: where the arrays came from (a folder, "embedded", "generated"); None
            from :func:`dataset_info`, which loads nothing.
    """

    name: str
    num_classes: int
    num_channels: int
    image_size: tuple[int, ...]
    class_names: tuple[str, ...]
    splits: tuple[str, str] = ("train", "test")
    source: str | None = None

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """The shape of one sample, (C, H, W)."""
        return (self.num_channels, *self.image_size)

    @property
    def test_split(self) -> str:
        """The name of the held-out split ("test", or "val" for fashion-mnist-mini)."""
        return self.splits[1]


@dataclass
class Dataset:
    """Both splits of a dataset; unpacks as ``x_train, y_train, x_test, y_test = load(...)``.

    ``x_*`` are float32 (N, C, H, W) in [0, 1], ``y_*`` int32 (N,). For
    ``fashion-mnist-mini`` the held-out split is the validation split (``x_val`` is an
    alias of ``x_test``).
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    info: DatasetInfo = field(repr=False)

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter((self.x_train, self.y_train, self.x_test, self.y_test))

    @property
    def x_val(self) -> np.ndarray:
        """Alias of ``x_test`` (the held-out split)."""
        return self.x_test

    @property
    def y_val(self) -> np.ndarray:
        """Alias of ``y_test`` (the held-out split)."""
        return self.y_test


_INFOS = {
    "mnist": DatasetInfo("mnist", 10, 1, (28, 28), tuple(str(i) for i in range(10))),
    "fashion-mnist": DatasetInfo("fashion-mnist", 10, 1, (28, 28), FASHION_MNIST_CLASSES),
    "fashion-mnist-mini": DatasetInfo(
        "fashion-mnist-mini", 10, 1, (28, 28), FASHION_MNIST_CLASSES, ("train", "val")
    ),
    "cifar10": DatasetInfo("cifar10", 10, 3, (32, 32), CIFAR10_CLASSES),
    "synthetic": DatasetInfo("synthetic", 10, 1, (28, 28), tuple(str(i) for i in range(10))),
}
_ALIASES = {"fmnist": "fashion-mnist", "fmnist-mini": "fashion-mnist-mini", "cifar-10": "cifar10"}


def available_datasets() -> list[str]:
    """The registry names accepted by :func:`load` and :func:`load_dataset`."""
    return list(_INFOS)


def _canonical(name: str) -> str:
    key = str(name).strip().lower().replace("_", "-")
    key = _ALIASES.get(key, key)
    if key not in _INFOS:
        raise ValueError(f"unknown dataset {name!r}; available: {', '.join(available_datasets())}")
    return key


# ----------------------------------------------------------------------------- lookup


_TORCHVISION_DIRS = {"mnist": "MNIST", "fashion-mnist": "FashionMNIST"}


def _candidate_dirs(name: str, data_dir: str | os.PathLike | None) -> list[tuple[Path, str]]:
    dirs: list[tuple[Path, str]] = []
    if data_dir is not None:
        d = Path(data_dir).expanduser()
        dirs += [(d, "data_dir"), (d / name, "data_dir")]
        if name in _TORCHVISION_DIRS:  # the layout torchvision leaves behind
            dirs.append((d / _TORCHVISION_DIRS[name] / "raw", "data_dir"))
    dirs.append((cache_dir() / name, f"cache folder; set ${CACHE_ENV} to move it"))
    if name == "fashion-mnist":
        dirs.append((DEBIAN_FASHION_MNIST_DIR, "Debian package dataset-fashion-mnist"))
    return dirs


def _find_in(folder: Path, rf: RemoteFile) -> Path | None:
    for candidate in (rf.name, *rf.alternatives):
        p = folder / candidate
        if p.exists():
            return p
    return None


def _unique(files: Sequence[RemoteFile]) -> list[RemoteFile]:
    out: list[RemoteFile] = []
    for f in files:
        if f not in out:
            out.append(f)
    return out


def locate_files(
    name: str,
    files: Sequence[RemoteFile],
    data_dir: str | os.PathLike | None = None,
    download: bool = True,
    progress: bool = True,
) -> tuple[list[Path], str]:
    """Find (or download) ``files`` of dataset ``name``; all must come from one folder.

    The folders are tried in order: ``data_dir``, ``data_dir/<name>``, the cache folder
    ``cache_dir()/<name>``, and for Fashion-MNIST :data:`DEBIAN_FASHION_MNIST_DIR`.
    Then, if ``download``, the missing files are downloaded into the cache folder.

    Returns:
        (the paths in the order of ``files``, the folder they were found in).

    Raises:
        DatasetNotFoundError: not found and not downloadable; says where it looked and
            how to get the files.
    """
    files = _unique(files)
    looked: list[str] = []
    for folder, why in _candidate_dirs(name, data_dir):
        paths = [_find_in(folder, f) for f in files]
        if all(p is not None for p in paths):
            return [p for p in paths if p is not None], str(folder)
        if not folder.is_dir():
            state = "no such folder"
        else:
            missing = [f.name for f, p in zip(files, paths) if p is None]
            state = "missing " + ", ".join(missing)
        looked.append(f"  - {folder} ({why}): {state}")
    remote = REMOTES.get(name)
    download_note = "download disabled (download=False)"
    if download and remote is not None:
        target = cache_dir() / name
        try:
            return _download_missing(remote, files, target, progress), str(target)
        except (DownloadError, ChecksumError) as e:
            download_note = f"download into {target} failed: {e}"
    elif remote is None:
        download_note = "this dataset cannot be downloaded"
    raise DatasetNotFoundError(_not_found_message(name, files, looked, download_note))


def _download_missing(remote: Any, files: list[RemoteFile], target: Path, progress: bool) -> list[Path]:
    """The paths of ``files`` in ``target``, downloading those not there yet."""
    paths = []
    for f in files:
        p = _find_in(target, f)
        if p is None:
            urls = [m + f.name for m in remote.mirrors]
            p = download_file(urls, target / f.name, f.sha256, progress=progress)
        paths.append(p)
    return paths


def _not_found_message(name: str, files: list[RemoteFile], looked: list[str], download_note: str) -> str:
    """Where :func:`locate_files` looked, and how to get the files."""
    remote = REMOTES.get(name)
    names = ", ".join(f.name for f in files)
    alt = "; IDX files may also be uncompressed" if any(f.name.endswith("-ubyte.gz") for f in files) else ""
    if any(f is CIFAR10_ARCHIVE for f in files):
        alt = "; or the extracted folder cifar-10-batches-bin"
    lines = [f"dataset {name!r} not found: singa needs {names}{alt}. It looked in:", *looked]
    lines.append(f"and then tried to download: {download_note}.")
    lines.append("To get the files, do one of:")
    if remote is not None:
        urls = ", ".join(remote.mirrors[0] + f.name for f in files)
        lines.append(f"  - allow the download (download=True) from {remote.mirrors[0]} (needs network)")
        lines.append(
            f"  - download {urls} yourself and pass the folder as data_dir (the CLI's --data-dir), "
            f"or put them in {cache_dir() / name}"
        )
        lines.append(f"    (checksums and details: {remote.homepage})")
    if name == "fashion-mnist":
        lines.append(
            "  - install the Debian package: apt-get install dataset-fashion-mnist "
            f"(it provides {DEBIAN_FASHION_MNIST_DIR})"
        )
        lines.append("  - or use the embedded subset that needs no files: dataset 'fashion-mnist-mini'")
    return "\n".join(lines)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_verified(path: Path, rf: RemoteFile, verify: bool) -> bytes:
    """The decompressed bytes of an IDX file, checked against the published checksums."""
    raw = path.read_bytes()
    if not verify:
        return decompress(raw, str(path))
    if raw[:2] == b"\x1f\x8b" and _sha256(raw) == rf.sha256:
        return decompress(raw, str(path))
    data = decompress(raw, str(path))
    if rf.raw_sha256 is not None and _sha256(data) == rf.raw_sha256:
        return data
    raise ChecksumError(
        f"{path} does not match the published checksum of {rf.name} (SHA-256 {rf.sha256}, or "
        f"{rf.raw_sha256} once decompressed): the file is corrupt or a different version. "
        "Delete it to download it again, or pass verify=False to use it anyway."
    )


# ----------------------------------------------------------------------------- loaders


def _to_float(images: np.ndarray) -> np.ndarray:
    """uint8 -> float32 in [0, 1] (exactly v/255 rounded to float32)."""
    x = images.astype(np.float32)
    x /= np.float32(255.0)
    return x


def _idx_pair(
    img_src: Path | bytes, lbl_src: Path | bytes, what: tuple[str, str], num_classes: int = 10
) -> tuple[np.ndarray, np.ndarray]:
    images = read_idx(img_src, expected_ndim=3, expected_type=0x08, name=what[0])
    labels = read_idx(lbl_src, expected_ndim=1, expected_type=0x08, name=what[1])
    if len(images) != len(labels):
        raise DataFormatError(
            f"{what[0]} holds {len(images)} images but {what[1]} holds {len(labels)} labels"
        )
    if len(labels) and labels.max() >= num_classes:
        raise DataFormatError(f"{what[1]}: label {labels.max()} out of range 0-{num_classes - 1}")
    n, h, w = images.shape
    return _to_float(images.reshape(n, 1, h, w)), labels.astype(np.int32)


def _load_idx(name, splits, data_dir, download, verify, progress):
    remote = REMOTES[name]
    files = [f for s in splits for f in remote.files[s]]
    paths, folder = locate_files(name, files, data_dir, download, progress)
    by_name = dict(zip([f.name for f in files], paths))
    out = {}
    for s in splits:
        img, lbl = remote.files[s]
        pi, pl = by_name[img.name], by_name[lbl.name]
        out[s] = _idx_pair(
            _read_verified(pi, img, verify), _read_verified(pl, lbl, verify), (str(pi), str(pl))
        )
    return out, folder


def _load_cifar10(splits, data_dir, download, verify, progress):
    (path,), folder = locate_files("cifar10", [CIFAR10_ARCHIVE], data_dir, download, progress)
    if path.is_dir():
        raw = {s: read_cifar10_dir(path, s) for s in splits}
        if verify:
            for s, n in (("train", 50000), ("test", 10000)):
                if s in raw and len(raw[s][1]) != n:
                    raise DataFormatError(f"{path}: the {s} split has {len(raw[s][1])} images, expected {n}")
    else:
        if verify:
            got = file_digest(path)
            if got != CIFAR10_ARCHIVE.sha256:
                raise ChecksumError(
                    f"{path}: SHA-256 {got} is not the published {CIFAR10_ARCHIVE.sha256} of "
                    "cifar-10-binary.tar.gz: the file is corrupt or a different version. "
                    "Delete it to download it again, or pass verify=False to use it anyway."
                )
        raw = read_cifar10_archive(path, splits)
    return {s: (_to_float(x), y.astype(np.int32)) for s, (x, y) in raw.items()}, folder


def _mini_val_mask(labels: np.ndarray, num_classes: int = 10) -> np.ndarray:
    """Every fifth image of each class (in file order, starting with the fifth) is validation."""
    mask = np.zeros(len(labels), dtype=bool)
    for c in range(num_classes):
        mask[np.flatnonzero(labels == c)[4::5]] = True
    return mask


def _load_mini(splits):
    img_rf, lbl_rf = FASHION_MNIST.files["test"]
    pi, pl = EMBEDDED_DIR / img_rf.name, EMBEDDED_DIR / lbl_rf.name
    x, y = _idx_pair(_read_verified(pi, img_rf, True), _read_verified(pl, lbl_rf, True), (str(pi), str(pl)))
    val = _mini_val_mask(y)
    parts = {"train": (x[~val], y[~val]), "val": (x[val], y[val])}
    return {s: parts[s] for s in splits}, "embedded"


def _load_synthetic(
    splits, shape=(1, 28, 28), num_classes=10, n=1024, n_test=None, seed=0, class_names=None
) -> tuple[dict, DatasetInfo]:
    shape = tuple(int(s) for s in shape)
    if not shape or any(s < 1 for s in shape):
        raise ValueError(f"synthetic: shape must be a non-empty tuple of positive sizes, got {shape}")
    if int(num_classes) < 1 or int(n) < 0 or (n_test is not None and int(n_test) < 0):
        raise ValueError(
            f"synthetic: need num_classes >= 1, n >= 0, n_test >= 0 (got {num_classes}, {n}, {n_test})"
        )
    num_classes, n = int(num_classes), int(n)
    n_test = max(1, n // 4) if n_test is None else int(n_test)
    rng = np.random.default_rng(seed)
    # A fixed random template per class plus uniform noise: random but learnable.
    templates = rng.random((num_classes, *shape), dtype=np.float32)

    def make(m: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, num_classes, size=m).astype(np.int32)
        x = rng.random((m, *shape), dtype=np.float32)
        x += templates[y]
        x *= np.float32(0.5)
        return x, y

    parts = {"train": make(n), "test": make(n_test)}
    names = tuple(class_names) if class_names is not None else tuple(str(i) for i in range(num_classes))
    if len(names) != num_classes:
        raise ValueError(f"synthetic: {len(names)} class names for {num_classes} classes")
    info = DatasetInfo("synthetic", num_classes, shape[0], shape[1:], names, source="generated")
    return {s: parts[s] for s in splits}, info


def dataset_info(name: str, **kwargs: Any) -> DatasetInfo:
    """Metadata of a dataset without loading it (``synthetic`` takes its keyword arguments)."""
    key = _canonical(name)
    if key == "synthetic":
        return replace(_load_synthetic((), n=0, n_test=0, **kwargs)[1], source=None)
    if kwargs:
        raise TypeError(f"dataset {key!r} takes no options, got {sorted(kwargs)}")
    return _INFOS[key]


def _load_splits(name, splits, data_dir, download, verify, progress, kwargs):
    key = _canonical(name)
    info = _INFOS[key]
    if key != "synthetic" and kwargs:
        raise TypeError(f"dataset {key!r} takes no options, got {sorted(kwargs)}")
    for s in splits:
        if s not in info.splits:
            raise ValueError(f"dataset {key!r} has splits {info.splits}, not {s!r}")
    if key == "synthetic":
        return _load_synthetic(splits, **kwargs)
    if key == "fashion-mnist-mini":
        parts, source = _load_mini(splits)
    elif key == "cifar10":
        parts, source = _load_cifar10(splits, data_dir, download, verify, progress)
    else:
        parts, source = _load_idx(key, splits, data_dir, download, verify, progress)
    return parts, replace(info, source=source)


def load(
    name: str,
    data_dir: str | os.PathLike | None = None,
    download: bool = True,
    *,
    verify: bool = True,
    progress: bool = True,
    **kwargs: Any,
) -> Dataset:
    """Load both splits of a dataset.

    Args:
        name: "mnist", "fashion-mnist", "fashion-mnist-mini", "cifar10" or "synthetic".
        data_dir: a folder to look in first (the CLI's ``--data-dir``).
        download: download missing files from the canonical mirror into the cache folder.
        verify: check files found on disk against the published checksums.
        progress: show a progress bar while downloading.
        **kwargs: options of ``synthetic``: ``shape`` (C, H, W) (default (1, 28, 28)),
            ``num_classes`` (10), ``n`` training samples (1024), ``n_test`` (n // 4),
            ``seed`` (0), ``class_names``.

    Returns:
        A :class:`Dataset` (unpacks to ``x_train, y_train, x_test, y_test``; ``.info``).

    Raises:
        DatasetNotFoundError: the files are nowhere and could not be downloaded.
        ChecksumError: a file does not have the published checksum.
        DataFormatError: a file is corrupt.
    """
    info = _INFOS[_canonical(name)]
    parts, info = _load_splits(name, info.splits, data_dir, download, verify, progress, kwargs)
    tr, te = parts[info.splits[0]], parts[info.splits[1]]
    return Dataset(tr[0], tr[1], te[0], te[1], info)


def load_dataset(
    name: str,
    data_dir: str | os.PathLike | None = None,
    split: str = "train",
    download: bool = True,
    *,
    verify: bool = True,
    progress: bool = True,
    **kwargs: Any,
) -> tuple[np.ndarray, np.ndarray]:
    """Load one split: ``(x float32 (N, C, H, W) in [0, 1], y int32 (N,))``.

    ``split`` is "train" or the dataset's held-out split: "test", or "val" for
    ``fashion-mnist-mini`` (see :attr:`DatasetInfo.splits`). Other arguments as :func:`load`.
    For ``synthetic`` both splits are generated from the seed, so a split is the same
    whether loaded alone or through :func:`load`.
    """
    key = _canonical(name)
    if key == "synthetic":
        parts, _ = _load_synthetic(("train", "test"), **kwargs)
        if split not in parts:
            raise ValueError(f"dataset 'synthetic' has splits ('train', 'test'), not {split!r}")
        return parts[split]
    parts, _ = _load_splits(key, (split,), data_dir, download, verify, progress, kwargs)
    return parts[split]
