"""Depth/space rearrangements: ONNX export checked by onnxruntime at two batch sizes (and, where
the test says so, imported back with ``sonnx.prepare`` and run against our output)."""

from __future__ import annotations

import pytest
from sonnx_helpers import op_types, rand, roundtrip

from singa import autograd

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_and_space_to_depth(mode):
    assert "DepthToSpace" in op_types(
        roundtrip(lambda x: autograd.depth_to_space(x, 2, mode), lambda b: [rand((b, 8, 2, 3))])
    )
    roundtrip(lambda x: autograd.space_to_depth(x, 2, mode), lambda b: [rand((b, 2, 4, 6))])
