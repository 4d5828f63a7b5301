"""What :meth:`~singa.model.Model.fit` accepts as data: numpy arrays (batched here),
a :class:`singa.data.DataLoader`, or any iterable of ``(x, y)`` batches; and the
batches as Tensors on the model's device."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from singa import device as _device
from singa import tensor

__all__ = [
    "ArrayBatches",
    "as_batches",
    "epoch_batches",
    "host",
    "peek",
    "is_arrays",
    "model_device",
    "num_batches",
    "split_batch",
    "split_validation",
    "to_tensors",
]


def _as_array(a: Any, what: str) -> np.ndarray:
    arr = np.asarray(a)
    if arr.ndim < 1:
        raise ValueError(f"fit: {what} must have a sample axis, got shape {arr.shape}")
    return arr


def _cast(arr: np.ndarray) -> np.ndarray:
    if np.issubdtype(arr.dtype, np.floating):
        return arr.astype(np.float32, copy=False)
    if np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_:
        return arr.astype(np.int32, copy=False)
    return arr


class ArrayBatches:
    """Mini-batches over arrays ``x`` (one array or a tuple of arrays, for models with
    several inputs) and ``y``: floating arrays as float32, integer ones as int32;
    with ``shuffle`` epoch ``e`` visits the samples in the order
    ``numpy.random.default_rng([seed, e]).permutation(n)`` (as DataLoader does); the
    last batch may be smaller."""

    def __init__(self, x: Any, y: Any, batch_size: int, shuffle: bool = False, seed: int | None = None):
        self.xs = tuple(_as_array(a, "x") for a in x) if isinstance(x, tuple | list) else (_as_array(x, "x"),)
        self.y = None if y is None else _as_array(y, "y")
        n = len(self.xs[0])
        for a in (*self.xs, *(() if self.y is None else (self.y,))):
            if len(a) != n:
                raise ValueError(f"fit: x and y hold different numbers of samples ({n} and {len(a)})")
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"fit: batch_size must be an int >= 1, got {batch_size!r}")
        self.n = n
        self.single = not isinstance(x, tuple | list)
        self.batch_size = batch_size
        self.shuffle = bool(shuffle)
        self.seed = (
            int(seed)
            if seed is not None
            else int(np.random.SeedSequence().generate_state(2, np.uint32).view(np.uint64)[0] % (2**63))
        )
        self.epoch = 0
        self.skip = 0

    def __len__(self) -> int:
        """Batches per epoch."""
        return math.ceil(self.n / self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter()`` epoch ``epoch``."""
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator:
        """One epoch of ``(x, y)`` batches (``x`` alone when ``y`` is None)."""
        order = np.random.default_rng([self.seed, self.epoch]).permutation(self.n) if self.shuffle else None
        self.epoch += 1
        start, self.skip = self.skip * self.batch_size, 0
        for lo in range(start, self.n, self.batch_size):
            idx = slice(lo, lo + self.batch_size) if order is None else order[lo : lo + self.batch_size]
            xs = tuple(_cast(a[idx]) for a in self.xs)
            xb = xs[0] if self.single else xs
            yield xb if self.y is None else (xb, _cast(self.y[idx]))

    def state_dict(self) -> dict:
        """The shuffling seed, the next epoch and the batches of it to skip."""
        return {"seed": self.seed, "epoch": self.epoch, "batch": self.skip}

    def load_state_dict(self, state: dict) -> None:
        """Continue from :meth:`state_dict`: the next ``iter()`` is epoch ``epoch`` from its
        batch ``batch``."""
        self.seed, self.epoch, self.skip = int(state["seed"]), int(state["epoch"]), int(state.get("batch", 0))


def is_arrays(x: Any) -> bool:
    """Whether ``x`` is a numpy array or a non-empty tuple/list of them."""
    return isinstance(x, np.ndarray) or (
        isinstance(x, tuple | list) and all(isinstance(a, np.ndarray) for a in x) and len(x) > 0
    )


def as_batches(x: Any, y: Any, batch_size: int, shuffle: bool, seed: int | None) -> Any:
    """Arrays become :class:`ArrayBatches`; anything else must be an iterable of
    batches (``y`` must then be None)."""
    if is_arrays(x):
        return ArrayBatches(x, y, batch_size, shuffle, seed)
    if y is not None:
        raise ValueError("fit: y is given only with array x (a DataLoader or iterable yields (x, y) batches)")
    if not isinstance(x, Iterable):
        raise TypeError(
            "fit: x must be a numpy array, a DataLoader or an iterable of (x, y) batches, "
            f"got {type(x).__name__}"
        )
    return x


def split_validation(x: Any, y: Any, fraction: float) -> tuple[Any, Any, Any, Any]:
    """Keras's ``validation_split``: the last ``fraction`` of the samples (before any
    shuffling) for validation; returns (x_train, y_train, x_val, y_val)."""
    if not 0 < fraction < 1:
        raise ValueError(f"fit: validation_split must be in [0, 1), got {fraction!r}")
    if not is_arrays(x) or y is None:
        raise ValueError("fit: validation_split needs numpy arrays x and y")
    xs = list(x) if isinstance(x, tuple | list) else [x]
    n = len(xs[0])
    cut = int(n * (1 - fraction))
    if cut in (0, n):
        raise ValueError(f"fit: validation_split {fraction} of {n} samples leaves an empty split")
    pick = (lambda a, s: tuple(v[s] for v in a)) if isinstance(x, tuple | list) else (lambda a, s: a[0][s])
    return pick(xs, slice(None, cut)), y[:cut], pick(xs, slice(cut, None)), y[cut:]


def num_batches(data: Any) -> int | None:
    """Batches per epoch, when the data knows."""
    try:
        return len(data)
    except TypeError:
        return None


def _resumable(data: Any) -> bool:
    """Whether ``data`` continues from a position (DataLoader's state_dict protocol)."""
    if not (callable(getattr(data, "state_dict", None)) and callable(getattr(data, "load_state_dict", None))):
        return False
    state = data.state_dict()
    return isinstance(state, dict) and "epoch" in state and "batch" in state


def epoch_batches(data: Any, epoch: int, skip: int = 0, limit: int | None = None) -> Iterator:
    """The batches of ``epoch`` (``set_epoch`` first when the data has it), from batch
    ``skip`` on and stopping after batch ``limit`` of the epoch. A loader with
    ``state_dict``/``load_state_dict`` (a DataLoader) starts at ``skip`` without building
    the skipped batches."""
    if skip and _resumable(data):
        data.load_state_dict({**data.state_dict(), "epoch": epoch, "batch": skip})
        it = iter(data)
        return it if limit is None else itertools.islice(it, max(0, limit - skip))
    if callable(getattr(data, "set_epoch", None)):
        data.set_epoch(epoch)
    it = iter(data)
    if skip or limit is not None:
        it = itertools.islice(it, skip, limit)
    return it


def split_batch(batch: Any) -> tuple[Any, Any]:
    """``(x, y)`` of a batch (``y`` None for a bare ``x``)."""
    if isinstance(batch, tuple | list) and len(batch) == 2:
        return batch[0], batch[1]
    return batch, None


def to_tensors(xb: Any, dev: Any) -> tuple:
    """The batch's inputs as Tensors on ``dev`` (a tuple: one per model input)."""
    if type(xb) is np.ndarray:  # the common case, without the generator
        return (tensor.from_numpy(xb, dev),)
    xs = xb if isinstance(xb, tuple | list) else (xb,)
    return tuple(a if isinstance(a, tensor.Tensor) else tensor.from_numpy(np.asarray(a), dev) for a in xs)


def model_device(model: Any) -> Any:
    """The device of the model's states (the default device before it has any)."""
    states = model.get_states() if model.initialized else {}
    for t in states.values():
        return t.device
    return _device.get_default_device()


def host(a: Any) -> np.ndarray:
    """A numpy array of a Tensor's or array's values (a copy of a Tensor's)."""
    if isinstance(a, tensor.Tensor):
        return a.to_numpy()
    if isinstance(a, np.ndarray):
        return a
    return np.asarray(a.get() if hasattr(a, "get") else a)


def peek(a: Any) -> np.ndarray:
    """Like :func:`host`, but a CPU Tensor's own array (no copy): for reading at once,
    before the next step may reuse it."""
    if isinstance(a, tensor.Tensor) and isinstance(a.data, np.ndarray):
        return a.data
    return host(a)
