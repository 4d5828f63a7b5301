"""DataLoader sharding for data-parallel ranks."""

from __future__ import annotations

import numpy as np
import pytest

from singa import data


@pytest.mark.parametrize("drop_last", [True, False])
@pytest.mark.parametrize("replicas", [2, 3])
def test_replicas_together_see_the_single_process_global_batches(replicas, drop_last):
    x = np.arange(50, dtype=np.float32).reshape(50, 1)
    y = np.arange(50)
    one = data.DataLoader(x, y, 4 * replicas, shuffle=True, seed=3, drop_last=drop_last)
    shards = [
        data.DataLoader(x, y, 4, shuffle=True, seed=3, drop_last=drop_last, num_replicas=replicas, rank=r)
        for r in range(replicas)
    ]
    assert all(len(s) == len(one) for s in shards)
    for epoch in range(2):
        for loader in [one, *shards]:
            loader.set_epoch(epoch)
        per_rank = [list(s) for s in shards]
        for j, (_, yb) in enumerate(one):
            parts = [per_rank[r][j][1] for r in range(replicas) if j < len(per_rank[r])]
            np.testing.assert_array_equal(np.concatenate(parts), yb)
        seen = np.concatenate([yb for rank in per_rank for _, yb in rank])
        assert len(seen) == len(set(seen.tolist()))  # disjoint


def test_bad_rank_is_refused():
    with pytest.raises(ValueError, match="rank 2 of 2"):
        data.DataLoader(np.zeros((4, 1)), None, 2, num_replicas=2, rank=2)
