"""DataLoader over datasets with worker processes: identical batches for any number of
workers, prefetch bounds, errors sent back from the workers."""

from __future__ import annotations

import gc
import multiprocessing as mp
import time

import numpy as np
import pytest
from fork_hazards import lock_held_over_garbage
from image_data import make_image_folder

from singa import data

#: a batch later than this fails the test with the workers' stacks instead of hanging it
LATE_S = 120


class Counting:
    """A dataset counting its reads in a shared counter (visible across processes)."""

    def __init__(self, n: int, fail_at: int | None = None):
        self.x = np.arange(n * 6, dtype=np.float32).reshape(n, 3, 2)
        self.reads = mp.get_context("fork").Value("i", 0)
        self.fail_at = fail_at

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        with self.reads.get_lock():
            self.reads.value += 1
        if i == self.fail_at:
            raise data.DataFormatError(f"sample {i} is broken")
        return self.x[i], i % 4


def _epochs(loader, n=2):
    return [[(xb.copy(), yb.copy()) for xb, yb in loader] for _ in range(n)]


@pytest.mark.parametrize("drop_last", [False, True])
def test_batches_are_identical_for_0_1_2_4_workers(drop_last):
    ds = Counting(23)
    ref = _epochs(
        data.DataLoader(ds, batch_size=4, shuffle=True, seed=5, drop_last=drop_last, mean=1.0, std=2.0)
    )
    assert len(ref[0]) == (5 if drop_last else 6)
    assert not np.array_equal(ref[0][0][1], ref[1][0][1])  # a new order every epoch
    for workers in (1, 2, 4):
        with data.DataLoader(
            ds,
            batch_size=4,
            shuffle=True,
            seed=5,
            drop_last=drop_last,
            mean=1.0,
            std=2.0,
            workers=workers,
            timeout=LATE_S,
        ) as loader:
            got = _epochs(loader)
        for e in range(2):
            assert len(got[e]) == len(ref[e])
            for (xa, ya), (xb, yb) in zip(got[e], ref[e]):
                np.testing.assert_array_equal(xa, xb)
                np.testing.assert_array_equal(ya, yb)
                assert xa.dtype == np.float32 and ya.dtype == np.int32


def test_image_folder_batches_match_without_and_with_workers(tmp_path):
    folder = data.ImageFolder(make_image_folder(tmp_path / "imgs", per_class=5))
    a = [b for b in data.DataLoader(folder, batch_size=4, shuffle=True, seed=1)]
    with data.DataLoader(folder, batch_size=4, shuffle=True, seed=1, workers=2, timeout=LATE_S) as loader:
        b = [b for b in loader]
    assert len(a) == len(b) == 4
    for (xa, ya), (xb, yb) in zip(a, b):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)


def test_reads_stay_within_prefetch_bound():
    ds = Counting(200)
    loader = data.DataLoader(ds, batch_size=5, workers=2, prefetch=2, timeout=LATE_S)
    it = iter(loader)
    next(it)
    for _ in range(100):  # let the workers build what they are allowed to
        if ds.reads.value >= 2 * 2 * 5:
            break
        time.sleep(0.02)
    # at most prefetch * workers batches in flight beyond the one handed out
    assert 5 <= ds.reads.value <= (2 * 2 + 1) * 5
    loader.close()


def test_in_process_loading_is_lazy():
    ds = Counting(100)
    it = iter(data.DataLoader(ds, batch_size=10))
    next(it)
    assert ds.reads.value == 10


def test_a_worker_error_is_raised_in_the_main_process():
    ds = Counting(20, fail_at=13)
    with data.DataLoader(ds, batch_size=4, workers=2, timeout=LATE_S) as loader:
        with pytest.raises(data.DataFormatError, match="sample 13 is broken"):
            list(loader)


def test_workers_survive_an_abandoned_epoch():
    ds = Counting(40)
    ref = [yb for _, yb in data.DataLoader(ds, batch_size=4, shuffle=True, seed=2)]
    with data.DataLoader(ds, batch_size=4, shuffle=True, seed=2, workers=2, timeout=LATE_S) as loader:
        next(iter(loader))  # epoch 0 abandoned after one batch
        loader.set_epoch(0)
        got = [yb for _, yb in loader]
    assert all(np.array_equal(a, b) for a, b in zip(got, ref)) and len(got) == len(ref)


class Stalling:
    """Every sample sleeps for a minute while ``stall`` is set (shared across processes)."""

    def __init__(self):
        self.stall = mp.get_context("fork").Value("i", 1)

    def __len__(self):
        return 12

    def __getitem__(self, i):
        if self.stall.value:
            time.sleep(60)
        return np.full((2,), i, np.float32), i % 3


def test_a_late_batch_raises_with_the_workers_stacks_and_the_next_epoch_starts_afresh(capfd):
    ds = Stalling()
    with data.DataLoader(ds, batch_size=4, workers=2, timeout=1.0) as loader:
        late = r"batch 0 did not arrive from worker 0 \(pid \d+\) within 1 s"
        with pytest.raises(data.WorkerError, match=late):
            list(loader)
        assert "(most recent call first)" in capfd.readouterr().err  # the workers' stacks
        ds.stall.value = 0
        got = list(loader)  # new workers
    assert [yb.tolist() for _, yb in got] == [[i % 3 for i in range(k, k + 4)] for k in (0, 4, 8)]
    assert [xb[:, 0].tolist() for xb, _ in got] == [list(range(k, k + 4)) for k in (0, 4, 8)]


class Collecting:
    """A dataset whose reads run the garbage collector."""

    def __len__(self):
        return 16

    def __getitem__(self, i):
        gc.collect()
        return np.full((2,), i, np.float32), i % 2


def test_workers_never_run_the_finalizers_of_the_parents_garbage():
    with lock_held_over_garbage():
        with data.DataLoader(Collecting(), batch_size=4, workers=2, timeout=LATE_S) as loader:
            got = [yb.tolist() for _, yb in loader]
    assert got == [[0, 1, 0, 1]] * 4


def test_arrays_and_array_dataset_give_the_same_batches():
    x = np.random.default_rng(0).normal(size=(17, 2, 3)).astype(np.float32)
    y = np.arange(17) % 3
    a = list(data.DataLoader(x, y, batch_size=5, shuffle=True, seed=4))
    ds = data.ArrayDataset(x, y)
    b = list(data.DataLoader(ds, batch_size=5, shuffle=True, seed=4, workers=1, timeout=LATE_S))
    for (xa, ya), (xb, yb) in zip(a, b):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)


def test_bad_arguments():
    with pytest.raises(ValueError, match="give y only with arrays"):
        data.DataLoader(data.ArrayDataset(np.zeros((3, 1))), np.zeros(3))
    with pytest.raises(ValueError, match="workers >= 0"):
        data.DataLoader(np.zeros((3, 1)), workers=-1)
    with pytest.raises(ValueError, match="prefetch >= 1"):
        data.DataLoader(np.zeros((3, 1)), prefetch=0)
    with pytest.raises(ValueError, match="timeout must be >= 0"):
        data.DataLoader(np.zeros((3, 1)), timeout=-1)


def test_regression_targets_stay_float():
    x = np.zeros((6, 2), np.float32)
    y = np.linspace(0, 1, 6).astype(np.float32)
    (_, yb), *_ = data.DataLoader(data.ArrayDataset(x, y), batch_size=6)
    assert yb.dtype == np.float32
    np.testing.assert_array_equal(yb, y)
