"""Mini-batches over numpy arrays or a dataset: batch size, seeded shuffling, drop_last,
normalisation, worker processes, and a resumable position.

Example::

    from singa import data
    x_train, y_train, x_val, y_val = data.load("fashion-mnist-mini")
    mean, std = data.channel_mean_std(x_train)
    train = data.DataLoader(x_train, y_train, batch_size=64, shuffle=True, seed=0, mean=mean, std=std)
    for epoch in range(3):
        for xb, yb in train:         # xb float32 (64, 1, 28, 28), yb int32 (64,)
            ...

    folder = data.ImageFolder("photos/train")           # decoded lazily, image by image
    loader = data.DataLoader(folder, batch_size=32, shuffle=True, seed=0, workers=2)
    state = loader.state_dict()                          # epoch, position, seed
    loader.load_state_dict(state)                        # the next iter() yields the rest
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import numpy as np

from singa.data.dataset import ArrayDataset, collate, is_dataset
from singa.data.worker_pool import WorkerPool, build_batch

__all__ = ["DataLoader", "channel_mean_std", "dataset_mean_std"]

#: version of the dict written by :meth:`DataLoader.state_dict`
STATE_VERSION = 1


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


def dataset_mean_std(
    dataset: Any, max_samples: int | None = None, seed: int = 0, batch_size: int = 256, workers: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (the samples' first axis) mean and standard deviation of a dataset's
    samples, as :func:`channel_mean_std`, over all of them or over ``max_samples`` drawn
    with ``seed`` (read in batches, ``workers`` processes: memory stays bounded)."""
    n = len(dataset)
    if n == 0:
        raise ValueError("dataset_mean_std: the dataset is empty")
    idx = np.arange(n)
    if max_samples is not None and n > max_samples:
        idx = np.sort(np.random.default_rng(seed).choice(n, size=int(max_samples), replace=False))
    total = total_sq = None
    count = 0
    for batch in DataLoader(_Subset(dataset, idx), batch_size=batch_size, workers=workers):
        xb = (batch[0] if isinstance(batch, tuple) else batch).astype(np.float64)
        xb = xb.reshape(xb.shape[0], xb.shape[1], -1) if xb.ndim > 2 else xb[:, :, None]
        s, sq = xb.sum(axis=(0, 2)), np.square(xb).sum(axis=(0, 2))
        total, total_sq = (s, sq) if total is None else (total + s, total_sq + sq)
        count += xb.shape[0] * xb.shape[2]
    if total is None or total_sq is None:  # (n > 0 was checked: the loader gave a batch)
        raise ValueError("dataset_mean_std: the loader gave no batch")
    mean = total / count
    var = np.maximum(total_sq / count - mean**2, 0.0)
    return mean.astype(np.float32), np.sqrt(var).astype(np.float32)


class _Subset:
    """The samples of ``dataset`` at ``indices`` (batches through its ``get_batch``)."""

    def __init__(self, dataset: Any, indices: np.ndarray):
        self.dataset, self.indices = dataset, indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> Any:
        return self.dataset[int(self.indices[i])]

    def get_batch(self, indices: Any) -> Any:
        return build_batch(self.dataset, self.indices[np.asarray(indices)], collate)


def _per_channel(value: Any, channels: int, ndim: int, what: str) -> np.ndarray:
    v = np.asarray(value, dtype=np.float32).reshape(-1)
    if v.size not in (1, channels):
        raise ValueError(
            f"DataLoader: {what} has {v.size} values for {channels} channels (give 1 or {channels})"
        )
    return v.reshape((1, v.size) + (1,) * (ndim - 2)) if ndim >= 2 else v


def _sample_shape(dataset: Any) -> tuple[int, ...]:
    """The shape of one sample of ``dataset`` (its first), for the normalisation's axes."""
    if isinstance(dataset, ArrayDataset):
        return dataset.x.shape[1:]
    if len(dataset) == 0:
        return ()
    first = dataset[0]
    return np.shape(first[0] if isinstance(first, tuple) else first)


def _close_pool(pool: WorkerPool) -> None:
    pool.close()


class DataLoader:
    """Iterates over ``(x, y)`` in mini-batches; each ``iter()`` is one epoch.

    Args:
        x: samples (N, C, H, W) (any (N, ...) works; normalisation is along axis 1), or a
            dataset (``len(ds)`` and ``ds[i] -> (x, y)`` or ``x``, see
            :mod:`singa.data.dataset`) such as :class:`~singa.data.ImageFolder`.
        y: labels (N,), or None to yield only ``x`` batches (None with a dataset).
        batch_size: samples per batch.
        shuffle: visit the samples in a new random order every epoch.
        seed: the shuffling seed; epoch ``e`` uses the permutation drawn from
            ``numpy.random.default_rng([seed, e])``, so a run is reproducible and can
            resume at any epoch with :meth:`set_epoch`, or at any batch with
            :meth:`load_state_dict`. None draws a random seed (kept in ``self.seed``).
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
        workers: processes that build batches in parallel (0: in this process). Batch
            ``k`` always goes to worker ``k % workers`` and batches are yielded in order,
            so they are identical for any number of workers. The processes start on the
            first ``iter()`` and stay for later epochs (:meth:`close` stops them).
        prefetch: batches each worker builds ahead of the consumer (at most
            ``prefetch * workers`` batches are held at once: memory stays bounded).
        collate_fn: turns a list of samples into a batch (default :func:`collate`);
            unused for datasets with a ``get_batch`` method.
        timeout: with workers, seconds to wait for a batch before raising
            :class:`~singa.data.worker_pool.WorkerError` (the workers' stacks go to
            standard error and the workers are stopped; the next ``iter()`` starts new
            ones). 0, the default, waits as long as the workers live.

    Batches are new float32 arrays (never views of ``x``); labels are int32 (float32
    targets of a regression dataset stay float32).
    """

    def __init__(
        self,
        x: Any,
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
        workers: int = 0,
        prefetch: int = 2,
        collate_fn: Callable[[list], Any] | None = None,
        timeout: float = 0,
    ):
        self.dataset = self._as_dataset(x, y)
        if int(batch_size) < 1:
            raise ValueError(f"DataLoader: batch_size must be >= 1, got {batch_size}")
        self.batch_size = int(batch_size)
        if int(num_replicas) < 1 or not 0 <= int(rank) < int(num_replicas):
            raise ValueError(f"DataLoader: need 0 <= rank < num_replicas, got rank {rank} of {num_replicas}")
        if int(workers) < 0 or int(prefetch) < 1:
            raise ValueError(f"DataLoader: need workers >= 0 and prefetch >= 1, got {workers} and {prefetch}")
        if not float(timeout) >= 0:
            raise ValueError(f"DataLoader: timeout must be >= 0 seconds, got {timeout}")
        self.num_replicas = int(num_replicas)
        self.rank = int(rank)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        if seed is None:
            seed = cast(int, np.random.SeedSequence().entropy) % (2**63)
        self.seed = int(seed)
        self.epoch = 0
        self.transform = transform
        self.workers = int(workers)
        self.prefetch = int(prefetch)
        self.timeout = float(timeout)
        self.collate_fn = collate_fn if collate_fn is not None else collate
        self._set_normalisation(mean, std)
        self._pool: WorkerPool | None = None
        self._skip = 0  # batches of epoch ``self.epoch`` already consumed (load_state_dict)
        self._position: tuple[int, int] | None = None  # (epoch, batches handed out) while iterating

    @staticmethod
    def _as_dataset(x: Any, y: Any) -> Any:
        if is_dataset(x):
            if y is not None:
                raise ValueError("DataLoader: give y only with arrays (a dataset yields its own labels)")
            return x
        x = np.asarray(x)
        if x.ndim < 1:
            raise ValueError("DataLoader: x must have a sample axis")
        if y is not None and len(np.asarray(y)) != len(x):
            raise ValueError(f"DataLoader: {len(x)} samples but {len(np.asarray(y))} labels")
        return ArrayDataset(x, y)

    def _set_normalisation(self, mean: Any, std: Any) -> None:
        self.mean = self.std = None
        if mean is None and std is None:
            return
        shape = _sample_shape(self.dataset)
        channels, ndim = (shape[0] if shape else 1), len(shape) + 1
        self.mean = None if mean is None else _per_channel(mean, channels, ndim, "mean")
        self.std = None if std is None else _per_channel(std, channels, ndim, "std")
        if self.std is not None and not np.all(self.std > 0):
            raise ValueError(f"DataLoader: std must be positive, got {self.std.reshape(-1)}")

    @property
    def x(self) -> np.ndarray | None:
        """The sample array (None when the loader reads a dataset other than arrays)."""
        return self.dataset.x if isinstance(self.dataset, ArrayDataset) else None

    @property
    def y(self) -> np.ndarray | None:
        """The label array (None without labels or for a dataset other than arrays)."""
        return self.dataset.y if isinstance(self.dataset, ArrayDataset) else None

    @property
    def num_samples(self) -> int:
        """Number of samples in the dataset."""
        return len(self.dataset)

    def __len__(self) -> int:
        """Number of batches per epoch (the same for every replica)."""
        n = len(self.dataset)
        step = self.batch_size * self.num_replicas
        return n // step if self.drop_last else math.ceil(n / step)

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter()`` epoch ``epoch`` from its start (its shuffle order
        depends only on seed and epoch)."""
        self.epoch = int(epoch)
        self._skip = 0
        self._position = None

    def order(self, epoch: int) -> np.ndarray:
        """The sample indices visited in epoch ``epoch``."""
        n = len(self.dataset)
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng([self.seed, int(epoch)]).permutation(n)

    # ----- resumable position ----------------------------------------------------------------
    def state_dict(self) -> dict:
        """Where the loader is, as JSON values: ``epoch`` and ``batch`` (the batches of that
        epoch already handed out), ``seed`` and what the position depends on. Taken
        mid-epoch it is the position after the last batch handed out; after an epoch's
        last batch it is the start of the next epoch."""
        epoch, batch = self._position if self._position is not None else (self.epoch, self._skip)
        return {
            "version": STATE_VERSION,
            "epoch": int(epoch),
            "batch": int(batch),
            "seed": self.seed,
            "shuffle": self.shuffle,
            "batch_size": self.batch_size,
            "num_samples": len(self.dataset),
            "drop_last": self.drop_last,
            "num_replicas": self.num_replicas,
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue from :meth:`state_dict`'s position: the next ``iter()`` yields exactly
        the batches of that epoch not yet handed out, then epochs go on as before.
        Raises ``ValueError`` (changing nothing) if the state does not fit this loader."""
        try:
            epoch, batch, seed = int(state["epoch"]), int(state["batch"]), int(state["seed"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(
                f"DataLoader.load_state_dict: not a loader state ({type(e).__name__}: {e})"
            ) from e
        if state.get("version", STATE_VERSION) != STATE_VERSION:
            raise ValueError(f"DataLoader.load_state_dict: unknown state version {state.get('version')!r}")
        differ = [
            f"{key} {state[key]!r} (this loader: {mine!r})"
            for key, mine in (
                ("batch_size", self.batch_size),
                ("num_samples", len(self.dataset)),
                ("shuffle", self.shuffle),
                ("drop_last", self.drop_last),
                ("num_replicas", self.num_replicas),
            )
            if key in state and state[key] != mine
        ]
        if differ:
            raise ValueError("DataLoader.load_state_dict: the state was saved with " + ", ".join(differ))
        if epoch < 0 or not 0 <= batch <= len(self):
            raise ValueError(
                f"DataLoader.load_state_dict: position epoch {epoch} batch {batch} is out of range"
            )
        self.seed, self.epoch, self._skip = seed, epoch, batch
        self._position = None

    # ----- iteration -------------------------------------------------------------------------------
    def _prepare(self, xb: np.ndarray) -> np.ndarray:
        xb = np.array(xb, dtype=np.float32, copy=True)
        if self.mean is not None:
            xb -= self.mean
        if self.std is not None:
            xb /= self.std
        return xb

    def __iter__(self) -> Iterator:
        """One epoch of batches; the epoch counter advances when ``iter()`` is called.
        After :meth:`load_state_dict` the first ``iter()`` skips the batches consumed."""
        epoch, skip = self.epoch, self._skip
        self.epoch += 1
        self._skip = 0
        self._position = (epoch, skip)
        return self._batches(self.order(epoch) if self.shuffle else None, epoch, skip)

    def _spans(self) -> Iterator[tuple[int, int]]:
        """(start, end) of this replica's slice of each global batch."""
        n = len(self.dataset)
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

    def _plan(self, order: np.ndarray | None, skip: int) -> list[tuple[int, int, int, np.ndarray]]:
        """(batch number, start, end, indices) of the epoch's batches from ``skip`` on."""
        plan = []
        for number, (start, end) in enumerate(self._spans()):
            if number < skip or end <= start:
                continue
            idx = np.arange(start, end) if order is None else order[start:end]
            plan.append((number, start, end, idx))
        return plan

    def _raw_batches(self, plan: list) -> Iterator:
        if self.workers == 0:
            for *_, idx in plan:
                yield build_batch(self.dataset, idx, self.collate_fn)
            return
        if self._pool is None or not self._pool.alive:
            self._pool = WorkerPool(self.dataset, self.workers, self.collate_fn, self.prefetch, self.timeout)
            weakref.finalize(self, _close_pool, self._pool)
        yield from self._pool.run([idx for *_, idx in plan])

    def _batches(self, order: np.ndarray | None, epoch: int, skip: int) -> Iterator:
        plan = self._plan(order, skip)
        total = len(self)
        for (number, start, _end, _idx), raw in zip(plan, self._raw_batches(plan)):
            xb, yb = raw if isinstance(raw, tuple) else (raw, None)
            xb = self._prepare(xb)
            if self.transform is not None:
                rng = np.random.default_rng([self.seed, epoch, start // self.batch_size, 1])
                xb = self.transform(xb, rng)
            done = number + 1
            self._position = (epoch + 1, 0) if done >= total else (epoch, done)
            if yb is None:
                yield xb
            else:
                yb = np.asarray(yb)
                yield xb, yb.astype(np.int32 if yb.dtype.kind in "iub" else np.float32, copy=True)
        self._position = (epoch + 1, 0)

    def close(self) -> None:
        """Stop the worker processes (a later ``iter()`` starts new ones)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self) -> DataLoader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
