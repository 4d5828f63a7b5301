"""Mini-batches over numpy arrays: batch size, seeded shuffling, drop_last, normalisation.

Example::

    from singa import data
    x_train, y_train, x_val, y_val = data.load("fashion-mnist-mini")
    mean, std = data.channel_mean_std(x_train)
    train = data.DataLoader(x_train, y_train, batch_size=64, shuffle=True, seed=0, mean=mean, std=std)
    for epoch in range(3):
        for xb, yb in train:         # xb float32 (64, 1, 28, 28), yb int32 (64,)
            ...
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

import numpy as np

__all__ = ["DataLoader", "channel_mean_std"]


def channel_mean_std(x: np.ndarray, chunk: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (axis 1) mean and standard deviation of ``x`` as float32 arrays of shape (C,).

    Accumulated in float64 over chunks of ``chunk`` samples, so it needs no float64 copy
    of the whole array.
    """
    x = np.asarray(x)
    if x.ndim < 2 or len(x) == 0:
        raise ValueError(f"channel_mean_std needs a non-empty array of shape (N, C, ...), got {x.shape}")
    axes = (0, *range(2, x.ndim))
    total = np.zeros(x.shape[1])
    total_sq = np.zeros(x.shape[1])
    for i in range(0, len(x), chunk):
        part = x[i : i + chunk].astype(np.float64)
        total += part.sum(axis=axes)
        total_sq += np.square(part).sum(axis=axes)
    count = x.size // x.shape[1]
    mean = total / count
    var = np.maximum(total_sq / count - mean**2, 0.0)
    return mean.astype(np.float32), np.sqrt(var).astype(np.float32)


def _per_channel(value, channels: int, ndim: int, what: str) -> np.ndarray:
    v = np.asarray(value, dtype=np.float32).reshape(-1)
    if v.size not in (1, channels):
        raise ValueError(
            f"DataLoader: {what} has {v.size} values for {channels} channels (give 1 or {channels})"
        )
    return v.reshape((1, v.size) + (1,) * (ndim - 2)) if ndim >= 2 else v


class DataLoader:
    """Iterates over ``(x, y)`` in mini-batches; each ``iter()`` is one epoch.

    Args:
        x: samples (N, C, H, W) (any (N, ...) works; normalisation is along axis 1).
        y: labels (N,), or None to yield only ``x`` batches.
        batch_size: samples per batch.
        shuffle: visit the samples in a new random order every epoch.
        seed: the shuffling seed; epoch ``e`` uses the permutation drawn from
            ``numpy.random.default_rng([seed, e])``, so a run is reproducible and can
            resume at any epoch with :meth:`set_epoch`. None draws a random seed
            (kept in ``self.seed``).
        drop_last: drop the last batch if it is smaller than ``batch_size``; otherwise
            it is yielded as a smaller batch.
        mean, std: optional per-channel normalisation, ``(x - mean) / std``; a scalar or
            one value per channel (see :func:`channel_mean_std`).
        transform: optional ``transform(batch, rng) -> batch`` applied to each normalised
            ``x`` batch (e.g. :func:`singa.image_tool.augment_batch`); ``rng`` is a numpy
            Generator seeded by (seed, epoch, batch index), so augmentations repeat
            exactly in a resumed run.
        num_replicas, rank: data-parallel sharding. Each epoch's order is cut into
            global batches of ``num_replicas * batch_size`` samples and replica ``rank``
            takes its ``batch_size`` slice of each, so the replicas see disjoint samples
            and together the batches one process would see with the global batch size
            (the same seed gives every replica the same order). A last global batch
            that is not full is shared out as evenly as possible (replicas may get one
            sample fewer, or none) unless ``drop_last``.

    Batches are new float32 arrays (never views of ``x``); labels are int32.
    """

    def __init__(
        self,
        x: np.ndarray,
        y: np.ndarray | None = None,
        batch_size: int = 32,
        shuffle: bool = False,
        seed: int | None = None,
        drop_last: bool = False,
        mean: float | Sequence[float] | np.ndarray | None = None,
        std: float | Sequence[float] | np.ndarray | None = None,
        transform: Callable[[np.ndarray, np.random.Generator], np.ndarray] | None = None,
        num_replicas: int = 1,
        rank: int = 0,
    ):
        self.x = np.asarray(x)
        self.y = None if y is None else np.asarray(y)
        if self.x.ndim < 1:
            raise ValueError("DataLoader: x must have a sample axis")
        if self.y is not None and len(self.y) != len(self.x):
            raise ValueError(f"DataLoader: {len(self.x)} samples but {len(self.y)} labels")
        if int(batch_size) < 1:
            raise ValueError(f"DataLoader: batch_size must be >= 1, got {batch_size}")
        self.batch_size = int(batch_size)
        if int(num_replicas) < 1 or not 0 <= int(rank) < int(num_replicas):
            raise ValueError(f"DataLoader: need 0 <= rank < num_replicas, got rank {rank} of {num_replicas}")
        self.num_replicas = int(num_replicas)
        self.rank = int(rank)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        if seed is None:
            seed = int(np.random.SeedSequence().entropy % (2**63))
        self.seed = int(seed)
        self.epoch = 0
        self.transform = transform
        channels = self.x.shape[1] if self.x.ndim >= 2 else 1
        self.mean = None if mean is None else _per_channel(mean, channels, self.x.ndim, "mean")
        self.std = None if std is None else _per_channel(std, channels, self.x.ndim, "std")
        if self.std is not None and not np.all(self.std > 0):
            raise ValueError(f"DataLoader: std must be positive, got {self.std.reshape(-1)}")

    @property
    def num_samples(self) -> int:
        """Number of samples in the dataset."""
        return len(self.x)

    def __len__(self) -> int:
        """Number of batches per epoch (the same for every replica)."""
        n = len(self.x)
        step = self.batch_size * self.num_replicas
        return n // step if self.drop_last else math.ceil(n / step)

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter()`` epoch ``epoch`` (its shuffle order depends only on seed and epoch)."""
        self.epoch = int(epoch)

    def order(self, epoch: int) -> np.ndarray:
        """The sample indices visited in epoch ``epoch``."""
        n = len(self.x)
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng([self.seed, int(epoch)]).permutation(n)

    def _prepare(self, xb: np.ndarray) -> np.ndarray:
        xb = xb.astype(np.float32, copy=True)
        if self.mean is not None:
            xb -= self.mean
        if self.std is not None:
            xb /= self.std
        return xb

    def __iter__(self) -> Iterator:
        """One epoch of batches; the epoch counter advances when ``iter()`` is called."""
        order = self.order(self.epoch) if self.shuffle else None
        self.epoch += 1
        return self._batches(order, self.epoch - 1)

    def _spans(self) -> Iterator[tuple[int, int]]:
        """(start, end) of this replica's slice of each global batch."""
        n = len(self.x)
        step = self.batch_size * self.num_replicas
        stop = n - n % step if self.drop_last else n
        for lo in range(0, stop, step):
            size = min(step, n - lo)
            if size == step:
                start = lo + self.rank * self.batch_size
                yield start, start + self.batch_size
            else:  # the last, partial global batch: shared out evenly
                bounds = np.linspace(0, size, self.num_replicas + 1).round().astype(int)
                yield lo + int(bounds[self.rank]), lo + int(bounds[self.rank + 1])

    def _batches(self, order: np.ndarray | None, epoch: int = 0) -> Iterator:
        for start, end in self._spans():
            if end <= start:
                continue
            if order is None:
                xb, yb = self.x[start:end], None if self.y is None else self.y[start:end]
            else:
                idx = order[start:end]
                xb, yb = self.x[idx], None if self.y is None else self.y[idx]
            xb = self._prepare(xb)
            if self.transform is not None:
                rng = np.random.default_rng([self.seed, epoch, start // self.batch_size, 1])
                xb = self.transform(xb, rng)
            if yb is None:
                yield xb
            else:
                yield xb, yb.astype(np.int32, copy=True)
