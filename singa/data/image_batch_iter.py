"""SINGA's ``ImageBatchIter``: worker processes that read, transform and batch images.

The list file has one image per line, ``path<delimiter>meta`` (the meta part optional).
When every meta is a whole number the labels come as an int32 array, otherwise as a
list of the meta strings (None where a line has none). ``image_transform(path)``
returns a list of images (PIL images or (H, W[, C]) arrays), e.g. the augmented
variants of one file from :class:`singa.image_tool.ImageTool`; each batch holds
``batch_size`` of them as a float32 array (batch, 3, H, W).

The stream of paths goes through the list in a new shuffled order every pass (seeded
by ``seed``). Every call of the transform must give the same number of images k (k
dividing ``batch_size``), so batch b holds the images of stream entries
b * batch_size / k onwards; worker ``w`` of ``n`` prepares batches ``w, w + n, ...``
and they are handed out in order: a seed gives the same files in the same batches
whatever the number of workers (random augmentations differ per worker). The workers
start as the DataLoader's do (:func:`singa.data.worker_pool.start_frozen`): they never
collect, nor run the finalizers of, the garbage they inherit.

Example::

    tool = image_tool.ImageTool()
    def transform(path):
        return tool.load(path).resize_by_range((112, 128)).random_crop((96, 96)).flip().get()

    it = ImageBatchIter("train.txt", 32, transform, delimiter=",", image_folder="images/")
    it.start()
    x, y = next(it)
    it.end()
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import random
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from singa.data.worker_pool import enter_worker, start_frozen

__all__ = ["ImageBatchIter"]

_ERROR = "__image_batch_iter_error__"


def _read_list(path: str, delimiter: str) -> tuple[list[tuple[str, str | None]], bool]:
    """(image path, meta) per non-empty line, and whether every meta is a label index."""
    items: list[tuple[str, str | None]] = []
    with open(path) as f:
        for line in f:
            line = line.strip("\n")
            if not line.strip():
                continue
            parts = line.split(delimiter)
            meta = parts[1].strip() if len(parts) > 1 else None
            items.append((parts[0].strip(), meta))
    if not items:
        raise ValueError(f"ImageBatchIter: {path} lists no images")
    return items, all(m is not None and m.isdigit() for _, m in items)


def _to_chw(img: Any) -> np.ndarray:
    """An image as a float32 (3, H, W) array (grey images are repeated on 3 channels)."""
    if hasattr(img, "convert"):
        img = img.convert("RGB")
    a = np.asarray(img, dtype=np.float32)
    if a.ndim == 2:
        a = np.repeat(a[:, :, None], 3, axis=2)
    if a.ndim != 3:
        raise ValueError(f"ImageBatchIter: an image must be (H, W) or (H, W, C), got shape {a.shape}")
    return a.transpose(2, 0, 1)


class _PathStream:
    """The endless sequence of list entries, reshuffled every pass (deterministic)."""

    def __init__(self, items: list, shuffle: bool, seed: int):
        self.items, self.shuffle, self.seed = items, shuffle, seed
        self._orders: dict[int, list[int]] = {}

    def __getitem__(self, position: int) -> tuple[str, str | None]:
        n = len(self.items)
        p, i = divmod(position, n)
        if p not in self._orders:
            order = list(range(n))
            if self.shuffle:
                random.Random(self.seed * 1_000_003 + p).shuffle(order)
            self._orders = {p: order}  # passes are visited in order: keep only the current one
        return self.items[self._orders[p][i]]


class ImageBatchIter:
    """Prefetch mini-batches of transformed images in worker processes.

    Args:
        img_list_file: the list file (see the module docstring).
        batch_size: images per batch.
        image_transform: ``path -> list of images``; must be picklable when processes are
            spawned rather than forked.
        shuffle: visit the list in a new random order on every pass.
        delimiter: separates the path from the meta in a line.
        image_folder: prefix joined to every path (None: the paths as written).
        capacity: batches kept ready, over all workers.
        num_workers: worker processes.
        seed: seeds the shuffling and each worker's ``random`` module (transforms using
            ``random`` become repeatable); None draws one.
    """

    def __init__(
        self,
        img_list_file: str,
        batch_size: int,
        image_transform: Callable[[str], list],
        shuffle: bool = True,
        delimiter: str = " ",
        image_folder: str | None = None,
        capacity: int = 10,
        num_workers: int = 1,
        seed: int | None = None,
    ):
        if int(batch_size) < 1 or int(capacity) < 1 or int(num_workers) < 1:
            raise ValueError(
                f"ImageBatchIter: batch_size, capacity and num_workers must be >= 1, "
                f"got {batch_size}, {capacity}, {num_workers}"
            )
        self.img_list_file = img_list_file
        self.items, self.is_label_index = _read_list(img_list_file, delimiter)
        self.num_samples = len(self.items)
        self.batch_size = int(batch_size)
        self.image_transform = image_transform
        self.shuffle = bool(shuffle)
        self.delimiter = delimiter
        self.image_folder = image_folder
        self.capacity = int(capacity)
        self.num_workers = int(num_workers)
        self.seed = random.randrange(2**31) if seed is None else int(seed)
        self._procs: list = []
        self._queues: list = []
        self._stop: Any = None
        self._next_batch = 0

    # ----- the worker side --------------------------------------------------------------------
    def _path(self, rel: str) -> str:
        return rel if self.image_folder is None else os.path.join(self.image_folder, rel)

    def _images(self, stream: _PathStream, pos: int, expected: int | None) -> tuple[list, str | None]:
        rel, meta = stream[pos]
        imgs = list(self.image_transform(self._path(rel)))
        if not imgs or (expected is not None and len(imgs) != expected):
            raise ValueError(
                f"ImageBatchIter: the transform gave {len(imgs)} image(s) for {rel}; "
                f"every call must give the same number ({expected}) as the first"
            )
        return imgs, meta

    def _make_batch(self, stream: _PathStream, batch: int, per_path: int) -> tuple:
        """Batch number ``batch``: the images of ``batch_size // per_path`` consecutive paths."""
        n_paths = self.batch_size // per_path
        xs: list = []
        metas: list = []
        for pos in range(batch * n_paths, (batch + 1) * n_paths):
            imgs, meta = self._images(stream, pos, per_path)
            xs += [_to_chw(im) for im in imgs]
            metas += [meta] * len(imgs)
        y = np.asarray([int(m) for m in metas], np.int32) if self.is_label_index else metas
        return np.stack(xs), y

    def _work(self, worker: int, out: Any, stop: Any) -> None:
        """Worker loop: batches worker, worker + n, ... of the stream."""
        enter_worker()
        random.seed(self.seed * 7919 + worker)
        np.random.seed((self.seed * 7919 + worker) % 2**32)
        stream = _PathStream(self.items, self.shuffle, self.seed)
        try:
            per_path = len(self._images(stream, 0, None)[0])
            if self.batch_size % per_path:
                raise ValueError(
                    f"ImageBatchIter: the transform gives {per_path} images per file, "
                    f"which does not divide batch_size {self.batch_size}"
                )
            batch = worker
            while not stop.is_set():
                _put(out, self._make_batch(stream, batch, per_path), stop)
                batch += self.num_workers
        except Exception:
            out.put((_ERROR, traceback.format_exc()))

    # ----- the consumer side ------------------------------------------------------------------
    def start(self) -> ImageBatchIter:
        """Start the worker processes. Returns self."""
        if self._procs:
            raise RuntimeError("ImageBatchIter: already started (call end() first)")
        ctx = mp.get_context()
        self._stop = ctx.Event()
        per_worker = max(1, self.capacity // self.num_workers)
        self._queues = [ctx.Queue(per_worker) for _ in range(self.num_workers)]
        self._procs = [
            ctx.Process(target=self._work, args=(w, q, self._stop), daemon=True)
            for w, q in enumerate(self._queues)
        ]
        start_frozen(self._procs)
        self._next_batch = 0
        return self

    def __next__(self) -> tuple[np.ndarray, Any]:
        """The next batch ``(x, y)``; raises RuntimeError if a worker failed or died."""
        if not self._procs:
            raise RuntimeError("ImageBatchIter: call start() before next()")
        w = self._next_batch % self.num_workers
        while True:
            try:
                item = self._queues[w].get(timeout=1.0)
                break
            except queue.Empty:
                if not self._procs[w].is_alive():
                    raise RuntimeError(f"ImageBatchIter: worker {w} exited without a batch") from None
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and item[0] == _ERROR:
            self.end()
            raise RuntimeError(f"ImageBatchIter: a worker failed:\n{item[1]}")
        self._next_batch += 1
        return item

    next = __next__

    def __iter__(self) -> ImageBatchIter:
        return self

    def end(self) -> None:
        """Stop and join the workers (safe to call twice)."""
        if not self._procs:
            return
        self._stop.set()
        for q in self._queues:
            _drain(q)
        for p in self._procs:
            p.join(timeout=2.0)
            if p.is_alive():
                p.terminate()
                p.join()
        self._procs, self._queues = [], []

    def __enter__(self) -> ImageBatchIter:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.end()


def _put(q: Any, item: Any, stop: Any) -> None:
    """Put ``item`` when there is room, giving up once ``stop`` is set."""
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return
        except queue.Full:
            continue


def _drain(q: Any) -> None:
    """Empty a queue so a worker blocked in put() can see the stop event."""
    try:
        while True:
            q.get_nowait()
    except (queue.Empty, OSError, ValueError):
        pass
