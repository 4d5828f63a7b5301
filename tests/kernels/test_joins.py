"""kernels.joins: numpy's concatenate, in blocks on the workers."""

import numpy as np
import pytest

from singa.kernels import joins, workers


def _pieces(shape, axis, sizes, rng, dtype=np.float32):
    out = []
    for n in sizes:
        s = list(shape)
        s[axis] = n
        out.append(rng.standard_normal(s).astype(dtype))
    return out


@pytest.mark.parametrize("axis", [1, 2])
@pytest.mark.parametrize("count", [1, 2])
def test_concatenate_equals_numpy(axis, count):
    """Large joins (blocks on the workers) and small ones (numpy) give numpy's array,
    with one worker or two; so do strided pieces, mixed dtypes and axis 0 (numpy)."""
    rng = np.random.default_rng(0)
    big = _pieces((16, 64, 128), axis, (128, 128, 96), rng)
    strided = [a.transpose(0, 2, 1) for a in _pieces((16, 128, 64), 3 - axis, (128, 96), rng)]
    small = _pieces((3, 4, 5), axis, (2, 5), rng)
    mixed = [big[0], big[1].astype(np.float64)]
    before = workers.worker_count()
    workers.set_worker_count(count)
    try:
        for arrays, ax in ((big, axis), (strided, axis), (small, axis), (mixed, axis), (big[:2], 0)):
            got = joins.concatenate(arrays, ax)
            want = np.concatenate(arrays, axis=ax)
            np.testing.assert_array_equal(got, want)
            assert got.dtype == want.dtype
    finally:
        workers.set_worker_count(before)


def test_large_joins_run_in_blocks(pieces_seen):
    """A join of at least MIN_SIZE elements along an inner axis is cut over the first axis."""
    arrays = [np.ones((16, 128, 128), np.float32)] * 3
    joins.concatenate(arrays, 2)
    seen = pieces_seen
    assert seen and len(seen[0]) > 1 and seen[0][0][0] == 0 and seen[0][-1][1] == 16
    seen.clear()
    joins.concatenate([np.ones((4, 8), np.float32)] * 2, 1)
    assert not seen
