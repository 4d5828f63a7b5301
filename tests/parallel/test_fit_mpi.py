"""Model.fit with a DistOpt on two MPI ranks: the parameters of one process at the
global batch, and the epoch metrics of the global batch (summed over the ranks)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import fit_worker as worker  # noqa: E402
from mpi_helpers import needs_mpi, run_mpi  # noqa: E402

pytestmark = needs_mpi


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("fit_ranks")
    proc = run_mpi(2, [os.path.join(os.path.dirname(__file__), "fit_worker.py"), str(out)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {
        kind: [dict(np.load(out / f"{kind}_rank{r}.npz")) for r in range(2)] for kind in ("fit", "budget")
    }


def test_two_ranks_fit_like_one_process_at_the_global_batch(ranks):
    ref = worker.train(distributed=False)
    for res in ranks["fit"]:
        assert res.keys() == ref.keys()
        for k in ref:
            if k.startswith("param/"):
                np.testing.assert_allclose(res[k], ref[k], rtol=1e-5, atol=1e-6, err_msg=k)
        np.testing.assert_array_equal(res["history/val_accuracy"], ref["history/val_accuracy"])
        np.testing.assert_allclose(res["history/val_loss"], ref["history/val_loss"], rtol=1e-6)
        np.testing.assert_allclose(res["history/loss"], ref["history/loss"], rtol=1e-5)
    for k in ranks["fit"][0]:
        np.testing.assert_array_equal(ranks["fit"][0][k], ranks["fit"][1][k], err_msg=k)


def test_ranks_with_different_clocks_stop_together_on_one_schedule(ranks):
    a, b = ranks["budget"]
    # rank 1's clock (2 s per batch) runs out after batch 10, rank 0's (1 s) would after 20:
    # both stop after batch 10
    assert int(a["steps"]) == int(b["steps"]) == 10
    assert int(a["decay_steps"]) == int(b["decay_steps"])
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
