"""RotaryEmbedding and SwiGLU import: values against numpy formulas, float64 gradients
through the handlers (built of autograd operators)."""

from __future__ import annotations

import numpy as np
import pytest
from sonnx_helpers import handler_fn, run_node_model

from singa.autograd.gradcheck import gradcheck

RNG = np.random.default_rng(0)


def _rope(x, cos, sin, interleaved, rd):
    """Rotary embedding of (batch, heads, seq, head) with per-(batch, seq) caches."""
    out = x.copy()
    c, s = cos[:, None], sin[:, None]
    if interleaved:
        x1, x2 = x[..., 0:rd:2], x[..., 1:rd:2]
        out[..., 0:rd:2], out[..., 1:rd:2] = c * x1 - s * x2, s * x1 + c * x2
    else:
        x1, x2 = x[..., : rd // 2], x[..., rd // 2 : rd]
        out[..., : rd // 2], out[..., rd // 2 : rd] = c * x1 - s * x2, s * x1 + c * x2
    return out


@pytest.mark.parametrize(("interleaved", "rd"), [(0, 0), (1, 0), (0, 4), (1, 4)])
def test_rotary_embedding_with_position_ids(interleaved, rd):
    x = RNG.standard_normal((2, 3, 5, 8)).astype(np.float32)
    half = (rd or 8) // 2
    cos, sin = (
        RNG.standard_normal((20, half)).astype(np.float32),
        RNG.standard_normal((20, half)).astype(np.float32),
    )
    pos = RNG.integers(0, 20, (2, 5))
    ins = {"x": x, "c_c": cos, "c_s": sin, "c_p": pos}
    (got,) = run_node_model(
        "RotaryEmbedding", ins, opset=23, interleaved=interleaved, rotary_embedding_dim=rd
    )
    np.testing.assert_allclose(got, _rope(x, cos[pos], sin[pos], interleaved, rd or 8), rtol=1e-5, atol=1e-6)
    fn = handler_fn("RotaryEmbedding", opset=23, n_inputs=3, interleaved=interleaved, rotary_embedding_dim=rd)
    gradcheck(
        fn,
        [
            RNG.standard_normal((1, 2, 3, 8)),
            RNG.standard_normal((1, 3, half)),
            RNG.standard_normal((1, 3, half)),
        ],
    )


def test_rotary_embedding_3d_input_splits_heads():
    x = RNG.standard_normal((2, 5, 12)).astype(np.float32)
    cos, sin = (
        RNG.standard_normal((2, 5, 2)).astype(np.float32),
        RNG.standard_normal((2, 5, 2)).astype(np.float32),
    )
    (got,) = run_node_model("RotaryEmbedding", {"x": x, "c_c": cos, "c_s": sin}, opset=23, num_heads=3)
    heads = x.reshape(2, 5, 3, 4).transpose(0, 2, 1, 3)
    want = _rope(heads, cos, sin, 0, 4).transpose(0, 2, 1, 3).reshape(2, 5, 12)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_swiglu():
    a, b = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))
    (got,) = run_node_model("SwiGLU", {"a": a, "b": b}, opset=28, alpha=0.5)
    np.testing.assert_allclose(got, a / (1 + np.exp(-0.5 * a)) * b, rtol=1e-12)
    gradcheck(handler_fn("SwiGLU", opset=28, n_inputs=2, alpha=0.5), [a, b])
