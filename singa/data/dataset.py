"""Map-style datasets: ``len(ds)`` samples, ``ds[i]`` one ``(x, y)`` pair (or ``x``).

Any object with ``__len__`` and ``__getitem__`` (that is not a numpy array, a list or a
tuple) is a dataset for :class:`singa.data.DataLoader`; a dataset may also define
``get_batch(indices) -> (xb, yb)`` to build a whole batch at once (faster for arrays).

- :class:`ArrayDataset`: samples held in numpy arrays.
- :func:`collate`: stack samples into a batch (float32 ``x``, int32 or float32 ``y``).
- :func:`stratified_split`: a seeded per-class split of sample indices.

Example::

    from singa import data
    ds = data.ArrayDataset(x, y)          # x (N, ...), y (N,)
    xb, yb = ds.get_batch([0, 5, 7])
    loader = data.DataLoader(ds, batch_size=32, shuffle=True, seed=0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["ArrayDataset", "collate", "is_dataset", "stratified_split"]


def is_dataset(obj: Any) -> bool:
    """Whether ``obj`` is a map-style dataset rather than an array of samples."""
    if isinstance(obj, np.ndarray | list | tuple):
        return False
    return hasattr(obj, "__len__") and hasattr(obj, "__getitem__")


def _label_array(labels: list) -> np.ndarray:
    y = np.asarray(labels)
    if y.dtype.kind in "iub":
        return y.astype(np.int32)
    return y.astype(np.float32)


def collate(samples: Sequence[Any]) -> Any:
    """Stack ``samples`` (each ``(x, y)`` or ``x``) into ``(xb, yb)`` or ``xb``:
    ``xb`` float32 of shape (B, ...), ``yb`` int32 for integer labels, else float32."""
    if not samples:
        raise ValueError("collate: no samples")
    if isinstance(samples[0], tuple):
        xs = np.stack([np.asarray(s[0], dtype=np.float32) for s in samples])
        return xs, _label_array([s[1] for s in samples])
    return np.stack([np.asarray(s, dtype=np.float32) for s in samples])


class ArrayDataset:
    """Samples from arrays held in memory: ``ds[i] == (x[i], y[i])`` (or ``x[i]``).

    Args:
        x: samples (N, ...).
        y: labels (N,) or targets (N, ...); None for unlabelled samples.
        class_names: optional names of the classes (label ``k`` is ``class_names[k]``).
    """

    def __init__(self, x: Any, y: Any = None, class_names: Sequence[str] | None = None):
        self.x = np.asarray(x)
        self.y = None if y is None else np.asarray(y)
        if self.x.ndim < 1:
            raise ValueError("ArrayDataset: x must have a sample axis")
        if self.y is not None and len(self.y) != len(self.x):
            raise ValueError(f"ArrayDataset: {len(self.x)} samples but {len(self.y)} labels")
        self.class_names = None if class_names is None else tuple(str(c) for c in class_names)

    def __len__(self) -> int:
        """Number of samples."""
        return len(self.x)

    def __getitem__(self, i: int) -> Any:
        """Sample ``i``: ``(x[i], y[i])``, or ``x[i]`` without labels."""
        if self.y is None:
            return self.x[i]
        return self.x[i], self.y[i]

    def get_batch(self, indices: Any) -> Any:
        """The samples at ``indices`` stacked: ``(xb, yb)`` or ``xb`` (arrays, copies)."""
        idx = np.asarray(indices, dtype=np.int64)
        if self.y is None:
            return self.x[idx]
        return self.x[idx], self.y[idx]

    def subset(self, indices: Any) -> ArrayDataset:
        """A new dataset of the samples at ``indices`` (copies)."""
        idx = np.asarray(indices, dtype=np.int64)
        return ArrayDataset(self.x[idx], None if self.y is None else self.y[idx], self.class_names)


def stratified_split(labels: Any, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Split sample indices into (train, val) keeping the class proportions: of each
    class's ``n`` samples, ``fraction * n`` rounded half up (at least one when ``n >= 2`` and
    ``fraction > 0``) are drawn for validation with ``numpy.random.default_rng(seed)``.
    Both index arrays are sorted."""
    if not 0.0 <= float(fraction) < 1.0:
        raise ValueError(f"the validation fraction must be in [0, 1), got {fraction}")
    labels = np.asarray(labels)
    rng = np.random.default_rng(int(seed))
    val: list[np.ndarray] = []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        k = int(np.floor(fraction * len(members) + 0.5))
        if fraction > 0 and len(members) >= 2:
            k = min(max(k, 1), len(members) - 1)
        val.append(rng.permutation(members)[:k])
    val_idx = np.sort(np.concatenate(val)) if val else np.zeros(0, np.int64)
    train_idx = np.setdiff1d(np.arange(len(labels)), val_idx)
    return train_idx, val_idx
