"""Convolutions: ONNX export checked by onnxruntime at two batch sizes (and, where
the test says so, imported back with ``sonnx.prepare`` and run against our output)."""

from __future__ import annotations

import numpy as np
import pytest
from sonnx_helpers import bilinear, check_export, handler_fn, param, rand, run_node_model

from singa import autograd
from singa.autograd.gradcheck import gradcheck


def test_conv_functional_asymmetric_padding_groups_dilation():
    w = param(rand((4, 2, 3, 3), seed=15), "w")
    check_export(lambda x: autograd.conv2d(x, w, None, 2, (0, 1, 2, 0), 2, 2), img(4))


def img(c):
    return lambda n: [rand((n, c, 5, 6))]


# ----- CausalConvWithState (import, opset 27) ---------------------------------------------------


def _causal_conv_numpy(x, w, b, past, silu):
    """The causal depthwise convolution written out: y[:, c, t] = sum_j w[c, 0, j] *
    padded[:, c, t + j] (+ b[c]), padded = past then x along time."""
    k = w.shape[2]
    padded = np.concatenate([past, x], axis=2)
    y = np.stack(
        [sum(w[:, 0, j][None, :] * padded[:, :, t + j] for j in range(k)) for t in range(x.shape[2])], 2
    )
    if b is not None:
        y = y + b[None, :, None]
    if silu:
        y = y / (1 + np.exp(-y))
    return y, padded[:, :, padded.shape[2] - (k - 1) :]


@pytest.mark.parametrize(
    "k, with_bias, with_past, act",
    [(3, True, True, "silu"), (4, False, False, "none"), (1, True, False, "swish")],
)
def test_causal_conv_with_state_matches_numpy_and_gradients(k, with_bias, with_past, act):
    rng = np.random.default_rng(k)
    x, w = rng.standard_normal((2, 3, 5)), rng.standard_normal((3, 1, k))
    b = rng.standard_normal(3) if with_bias else None
    past = rng.standard_normal((2, 3, k - 1)) if with_past else np.zeros((2, 3, k - 1))
    inputs = {"x": x, "w": w} | ({"b": b} if with_bias else {}) | ({"p": past} if with_past else {})
    y, state = run_node_model("CausalConvWithState", inputs, n_out=2, opset=27, activation=act)
    want_y, want_state = _causal_conv_numpy(x, w, b, past, act != "none")
    np.testing.assert_allclose(y, want_y, rtol=1e-12)
    np.testing.assert_array_equal(state, want_state)
    assert state.shape == (2, 3, k - 1)
    fn = handler_fn("CausalConvWithState", opset=27, n_inputs=len(inputs), activation=act)
    gradcheck(fn, list(inputs.values()))


def test_causal_conv_with_state_refuses_a_full_kernel():
    x, w = np.zeros((1, 2, 4)), np.zeros((2, 2, 3))
    with pytest.raises(ValueError, match=r"CausalConvWithState node .*weight \(channels, 1, k\)"):
        run_node_model("CausalConvWithState", {"x": x, "w": w}, n_out=2, opset=27)


# ----- DeformConv (import, opset 19) ----------------------------------------------------------


def _deform_numpy(x, w, off, b, mask, stride, pad, group, og):
    n, c, _, _ = x.shape
    oc, cg, kh, kw = w.shape
    _, _, oh, ow = off.shape
    off = off.reshape(n, og, kh, kw, 2, oh, ow)
    mask = np.ones((n, og, kh, kw, oh, ow)) if mask is None else mask.reshape(n, og, kh, kw, oh, ow)
    y = np.zeros((n, oc, oh, ow)) + (0 if b is None else b.reshape(1, -1, 1, 1))
    for bi, o, ci, i, j, a, e in np.ndindex(n, oc, c, oh, ow, kh, kw):
        if ci // cg != o // (oc // group):
            continue
        gi = ci // (c // og)
        py = i * stride - pad + a + off[bi, gi, a, e, 0, i, j]
        px = j * stride - pad + e + off[bi, gi, a, e, 1, i, j]
        y[bi, o, i, j] += w[o, ci % cg, a, e] * mask[bi, gi, a, e, i, j] * bilinear(x[bi, ci], py, px)
    return y


@pytest.mark.parametrize("with_mask, group, og", [(True, 1, 2), (False, 2, 1)])
def test_deform_conv_matches_a_bilinear_loop_and_gradients(with_mask, group, og):
    rng = np.random.default_rng(og)
    x = rng.standard_normal((1, 4, 5, 5))
    w = rng.standard_normal((2, 4 // group, 2, 2))
    off = rng.uniform(-1.5, 1.5, (1, og * 2 * 2 * 2, 5, 5))  # stride 1, pads 1: 5x5 out
    b = rng.standard_normal(2)
    mask = rng.uniform(0, 1, (1, og * 4, 5, 5)) if with_mask else None
    inputs = {"x": x, "w": w, "off": off, "b": b} | ({"m": mask} if with_mask else {})
    attrs = {"pads": [1, 1, 0, 0], "group": group, "offset_group": og}
    (y,) = run_node_model("DeformConv", inputs, opset=19, **attrs)
    np.testing.assert_allclose(y, _deform_numpy(x, w, off, b, mask, 1, 1, group, og), rtol=1e-10, atol=1e-12)
    gradcheck(handler_fn("DeformConv", opset=19, n_inputs=len(inputs), **attrs), list(inputs.values()))


def test_deform_conv_without_offsets_is_a_convolution():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 3, 6, 5)), rng.standard_normal((4, 3, 3, 3))
    off = np.zeros((2, 18, 2, 2))
    (y,) = run_node_model("DeformConv", {"x": x, "w": w, "off": off}, opset=19, strides=[2, 2])
    (want,) = run_node_model("Conv", {"x": x, "w": w}, opset=19, strides=[2, 2])
    np.testing.assert_allclose(y, want, rtol=1e-10)
