"""Helpers of the singa-train tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from singa import checkpoint

#: a tiny, fast run: the MLP on generated data (1024 samples, 32 steps per epoch of 32)
TINY = ["mlp", "--data", "synthetic", "--batch-size", "32"]


def read_log(path: Path | str) -> list[dict]:
    """The records of a JSON-lines metrics log."""
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def run_state(path: Path | str) -> dict:
    """The singa-train run state stored in a checkpoint."""
    return checkpoint.read(str(path)).aux_values["singa_train"]


def assert_same_arrays(a: Path | str, b: Path | str) -> int:
    """Every array of two checkpoints (model states, optimizer slots) is bitwise equal;
    returns how many there are."""
    xa, xb = checkpoint.read_arrays(str(a)), checkpoint.read_arrays(str(b))
    assert sorted(xa) == sorted(xb)
    for k in xa:
        assert xa[k].dtype == xb[k].dtype and xa[k].shape == xb[k].shape, k
        np.testing.assert_array_equal(xa[k], xb[k], err_msg=k)
    return len(xa)


def error_lines(stderr: str) -> list[str]:
    """The non-empty lines of stderr."""
    return [ln for ln in stderr.splitlines() if ln.strip()]
