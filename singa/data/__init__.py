"""Datasets and mini-batches: numpy arrays (N, C, H, W) float32 in [0, 1], int32 labels.

- :func:`load` / :func:`load_dataset`: "mnist", "fashion-mnist", "fashion-mnist-mini"
  (embedded, no network needed), "cifar10" (binary version), "synthetic".
- :class:`DataLoader`: batches of arrays or of a dataset, with seeded shuffling, drop_last,
  per-channel normalisation, worker processes (``workers=N``) and a resumable position
  (``state_dict`` / ``load_state_dict``).
- :class:`ImageFolder` (a folder per class, decoded lazily), :class:`CSVDataset`,
  :class:`ArrayDataset`: datasets (``len(ds)``, ``ds[i] -> (x, y)``).
- :func:`load_user_data`: ``imagefolder:DIR``, ``npz:FILE``, ``csv:FILE`` with both
  splits, class names and the training split's normalisation.
- :class:`ImageBatchIter`: SINGA's prefetching iterator over image files listed in a text file.
- :func:`cache_dir`: where downloads go (``$SINGA_DATA`` or ``~/.cache/singa``).

Example::

    from singa import data
    ds = data.load("fashion-mnist-mini")
    for xb, yb in data.DataLoader(ds.x_train, ds.y_train, batch_size=64, shuffle=True, seed=0):
        ...
"""

from singa.data import text
from singa.data.csv_dataset import CSVDataset
from singa.data.dataset import ArrayDataset, collate, is_dataset, stratified_split
from singa.data.datasets import (
    Dataset,
    DatasetInfo,
    DatasetNotFoundError,
    RemoteFile,
    available_datasets,
    dataset_info,
    load,
    load_dataset,
    locate_files,
)
from singa.data.download import ChecksumError, DownloadError, cache_dir, download_file
from singa.data.idx import DataFormatError, read_idx
from singa.data.image_batch_iter import ImageBatchIter
from singa.data.image_folder import IMG_EXTENSIONS, ImageFolder, find_classes, read_image
from singa.data.loader import DataLoader, channel_mean_std, dataset_mean_std
from singa.data.user_data import SPEC_KINDS, UserData, as_samples, load_user_data, parse_data_spec
from singa.data.worker_pool import WorkerError

__all__ = [
    "IMG_EXTENSIONS",
    "ArrayDataset",
    "CSVDataset",
    "ImageFolder",
    "WorkerError",
    "SPEC_KINDS",
    "UserData",
    "as_samples",
    "load_user_data",
    "parse_data_spec",
    "collate",
    "dataset_mean_std",
    "find_classes",
    "is_dataset",
    "read_image",
    "stratified_split",
    "text",
    "ChecksumError",
    "DataFormatError",
    "DataLoader",
    "Dataset",
    "DatasetInfo",
    "DatasetNotFoundError",
    "DownloadError",
    "ImageBatchIter",
    "RemoteFile",
    "available_datasets",
    "cache_dir",
    "channel_mean_std",
    "dataset_info",
    "download_file",
    "load",
    "load_dataset",
    "locate_files",
    "read_idx",
]
