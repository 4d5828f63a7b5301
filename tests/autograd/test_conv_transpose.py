"""conv_transpose2d / conv_transpose3d: gradient checks and forward checks against direct loops."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from gpu_compare import assert_gpu_matches_cpu  # noqa: I001

from singa import autograd, tensor
from singa.autograd.conv_transpose import ConvTranspose3d, conv_transpose2d, conv_transpose3d
from singa.autograd.gradcheck import gradcheck


def reference(x, w, b, stride, pads, outpad, dilation, groups):
    """Scatter each input pixel times its filter into the full output, then crop."""
    n, ci, h, wd = x.shape
    _, cog, kh, kw = w.shape
    (sh, sw), (dh, dw), (oph, opw) = stride, dilation, outpad
    hf, wf = (h - 1) * sh + (kh - 1) * dh + 1 + oph, (wd - 1) * sw + (kw - 1) * dw + 1 + opw
    full = np.zeros((n, cog * groups, hf, wf))
    cig = ci // groups
    for c in range(ci):
        g = c // cig
        for i in range(h):
            for j in range(wd):
                for u in range(kh):
                    for v in range(kw):
                        full[:, g * cog : (g + 1) * cog, i * sh + u * dh, j * sw + v * dw] += (
                            x[:, c, i, j][:, None] * w[c, :, u, v][None, :]
                        )
    t, l, bt, r = pads
    y = full[:, :, t : hf - bt, l : wf - r]
    return y if b is None else y + b.reshape(1, -1, 1, 1)


CASES = [
    # ci, co, groups, stride, pads, outpad, dilation, kernel
    (2, 3, 1, (1, 1), (0, 0, 0, 0), (0, 0), (1, 1), (3, 3)),
    (4, 6, 2, (2, 2), (1, 0, 1, 0), (1, 0), (1, 1), (3, 3)),
    (3, 2, 1, (1, 1), (0, 0, 0, 0), (0, 0), (2, 2), (2, 2)),
    (2, 4, 1, (3, 2), (0, 1, 2, 1), (2, 1), (1, 1), (3, 2)),
    (2, 2, 2, (2, 1), (1, 1, 0, 0), (0, 0), (1, 2), (2, 3)),
]


@pytest.mark.parametrize("ci,co,groups,stride,pads,outpad,dilation,kernel", CASES)
def test_forward_matches_direct_loop(ci, co, groups, stride, pads, outpad, dilation, kernel):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, ci, 4, 3))
    w = rng.standard_normal((ci, co // groups) + kernel)
    b = rng.standard_normal(co)
    y = conv_transpose2d(
        tensor.from_numpy(x),
        tensor.from_numpy(w),
        tensor.from_numpy(b),
        stride,
        pads,
        outpad,
        dilation,
        groups,
    ).to_numpy()
    np.testing.assert_allclose(y, reference(x, w, b, stride, pads, outpad, dilation, groups), atol=1e-12)


@pytest.mark.parametrize("ci,co,groups,stride,pads,outpad,dilation,kernel", CASES)
def test_gradcheck(ci, co, groups, stride, pads, outpad, dilation, kernel):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, ci, 3, 3))
    w = rng.standard_normal((ci, co // groups) + kernel)
    b = rng.standard_normal(co)
    gradcheck(lambda a, f, c: conv_transpose2d(a, f, c, stride, pads, outpad, dilation, groups), [x, w, b])


def test_gradcheck_without_bias_and_negative_pads():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 2, 3, 2))
    w = rng.standard_normal((2, 3, 2, 2))
    gradcheck(lambda a, f: conv_transpose2d(a, f, None, 2, (-1, 0, -1, 1)), [x, w])
    y = conv_transpose2d(tensor.from_numpy(x), tensor.from_numpy(w), None, 2, (-1, 0, -1, 1)).to_numpy()
    full = reference(x, w, None, (2, 2), (0, 0, 0, 0), (0, 0), (1, 1), 1)
    np.testing.assert_allclose(y[:, :, 1:-1, :], full[:, :, :, :-1], atol=1e-12)
    assert np.all(y[:, :, 0] == 0) and np.all(y[:, :, -1] == 0)


def test_matches_torch_when_available():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 5, 4))
    w = rng.standard_normal((4, 3, 3, 3))
    b = rng.standard_normal(6)
    want = torch.nn.functional.conv_transpose2d(
        torch.tensor(x), torch.tensor(w), torch.tensor(b), stride=2, padding=1, output_padding=1, groups=2
    ).numpy()
    got = conv_transpose2d(tensor.from_numpy(x), tensor.from_numpy(w), tensor.from_numpy(b), 2, 1, 1, 1, 2)
    np.testing.assert_allclose(got.to_numpy(), want, atol=1e-12)


def test_shape_errors():
    x = tensor.from_numpy(np.zeros((1, 4, 3, 3)))
    with pytest.raises(ValueError, match="do not match"):
        conv_transpose2d(x, tensor.from_numpy(np.zeros((3, 2, 2, 2))))
    with pytest.raises(ValueError, match="bias"):
        conv_transpose2d(x, tensor.from_numpy(np.zeros((4, 2, 2, 2))), tensor.from_numpy(np.zeros(3)))
    with pytest.raises(ValueError, match="empty"):
        conv_transpose2d(x, tensor.from_numpy(np.zeros((4, 2, 1, 1))), padding=2)


def reference_nd(x, w, b, stride, pads, outpad, dilation, groups):
    """Any number of spatial axes: scatter each input cell times its filter into the
    full output, crop (or grow, for negative pads)."""
    nd = x.ndim - 2
    n, ci = x.shape[:2]
    cog, kernel = w.shape[1], w.shape[2:]
    full_sizes = [
        (x.shape[2 + a] - 1) * stride[a] + (kernel[a] - 1) * dilation[a] + 1 + outpad[a] for a in range(nd)
    ]
    full = np.zeros((n, cog * groups, *full_sizes))
    cig = ci // groups
    for c in range(ci):
        g = c // cig
        for pos in itertools.product(*(range(v) for v in x.shape[2:])):
            for js in itertools.product(*(range(k) for k in kernel)):
                at = tuple(pos[a] * stride[a] + js[a] * dilation[a] for a in range(nd))
                full[(slice(None), slice(g * cog, (g + 1) * cog)) + at] += (
                    x[(slice(None), c) + pos][:, None] * w[(c, slice(None)) + js][None, :]
                )
    grow = [(max(-pads[a], 0), max(-pads[a + nd], 0)) for a in range(nd)]
    full = np.pad(full, [(0, 0), (0, 0)] + grow)
    sl = tuple(slice(max(pads[a], 0), full.shape[2 + a] - max(pads[a + nd], 0)) for a in range(nd))
    y = full[(slice(None), slice(None)) + sl]
    return y if b is None else y + b.reshape((1, -1) + (1,) * nd)


CASES_3D = [
    # ci, co, groups, stride, pads, outpad, dilation, kernel
    (1, 2, 1, (1, 1, 1), (0,) * 6, (0, 0, 0), (1, 1, 1), (3, 3, 3)),
    (4, 4, 2, (2, 1, 2), (1, 0, 1, 0, 1, 1), (1, 0, 1), (1, 1, 1), (3, 2, 2)),
    (2, 3, 1, (1, 2, 1), (0, 1, 0, 1, 0, 0), (0, 1, 0), (2, 1, 2), (2, 2, 2)),
    (2, 2, 2, (2, 2, 1), (-1, 0, 1, -1, 1, 0), (0, 0, 0), (1, 2, 1), (2, 3, 1)),
]


@pytest.mark.parametrize("ci,co,groups,stride,pads,outpad,dilation,kernel", CASES_3D)
def test_3d_forward_matches_direct_loop(ci, co, groups, stride, pads, outpad, dilation, kernel):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, ci, 3, 2, 3))
    w = rng.standard_normal((ci, co // groups) + kernel)
    b = rng.standard_normal(co)
    y = conv_transpose3d(
        tensor.from_numpy(x),
        tensor.from_numpy(w),
        tensor.from_numpy(b),
        stride,
        pads,
        outpad,
        dilation,
        groups,
    )
    want = reference_nd(x, w, b, stride, pads, outpad, dilation, groups)
    np.testing.assert_allclose(y.to_numpy(), want, atol=1e-12)


def test_2d_reference_agrees_with_nd_reference():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 4, 3, 3))
    w = rng.standard_normal((4, 3, 3, 2))
    args = ((2, 1), (1, 0, 0, 1), (1, 0), (1, 2), 2)
    np.testing.assert_allclose(reference(x, w, None, *args), reference_nd(x, w, None, *args), atol=1e-12)


@pytest.mark.parametrize("ci,co,groups,stride,pads,outpad,dilation,kernel", CASES_3D)
def test_3d_gradcheck(ci, co, groups, stride, pads, outpad, dilation, kernel):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, ci, 2, 2, 3))
    w = rng.standard_normal((ci, co // groups) + kernel)
    b = rng.standard_normal(co)
    gradcheck(lambda a, f, c: conv_transpose3d(a, f, c, stride, pads, outpad, dilation, groups), [x, w, b])
    gradcheck(lambda a, f: conv_transpose3d(a, f, None, stride, pads, outpad, dilation, groups), [x, w])


def test_3d_attributes_and_symmetric_padding():
    prev = autograd.training
    autograd.training = True
    try:
        x = tensor.from_numpy(np.zeros((1, 2, 3, 3, 3)))
        x.requires_grad = True
        y = conv_transpose3d(x, tensor.from_numpy(np.zeros((2, 1, 2, 3, 2))), None, 2, (1, 0, 1), 1, 1, 2)
    finally:
        autograd.training = prev
    op = y.creator
    assert isinstance(op, ConvTranspose3d)
    assert op.kernel_size == (2, 3, 2) and op.stride == (2, 2, 2) and op.pads == (1, 0, 1, 1, 0, 1)
    assert op.output_padding == (1, 1, 1) and op.dilation == (1, 1, 1) and op.groups == 2 and not op.bias
    assert y.shape == (1, 2, 5, 8, 5)


def test_3d_matches_torch_when_available():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 4, 3, 4, 3))
    w = rng.standard_normal((4, 3, 3, 2, 3))
    b = rng.standard_normal(6)
    want = torch.nn.functional.conv_transpose3d(
        torch.tensor(x),
        torch.tensor(w),
        torch.tensor(b),
        stride=2,
        padding=1,
        output_padding=1,
        groups=2,
        dilation=1,
    ).numpy()
    got = conv_transpose3d(tensor.from_numpy(x), tensor.from_numpy(w), tensor.from_numpy(b), 2, 1, 1, 1, 2)
    np.testing.assert_allclose(got.to_numpy(), want, atol=1e-12)


def test_3d_shape_errors():
    x = tensor.from_numpy(np.zeros((1, 4, 3, 3, 3)))
    with pytest.raises(ValueError, match=r"conv_transpose3d: x must have 3 spatial axes"):
        conv_transpose3d(tensor.from_numpy(np.zeros((1, 4, 3, 3))), tensor.from_numpy(np.zeros((4, 2, 2, 2))))
    with pytest.raises(ValueError, match=r"conv_transpose3d: .* do not match with groups=3"):
        conv_transpose3d(x, tensor.from_numpy(np.zeros((4, 2, 2, 2, 2))), groups=3)
    with pytest.raises(ValueError, match="conv_transpose3d: bias"):
        conv_transpose3d(x, tensor.from_numpy(np.zeros((4, 2, 2, 2, 2))), tensor.from_numpy(np.zeros(3)))
    with pytest.raises(ValueError, match="conv_transpose3d: stride must be an int or 3 ints >= 1"):
        conv_transpose3d(x, tensor.from_numpy(np.zeros((4, 2, 2, 2, 2))), stride=(1, 2))
    with pytest.raises(ValueError, match="conv_transpose3d: padding must be an int, 3 ints or 6 ints"):
        conv_transpose3d(x, tensor.from_numpy(np.zeros((4, 2, 2, 2, 2))), padding=(1, 1))
    with pytest.raises(ValueError, match="conv_transpose3d: output would be empty"):
        conv_transpose3d(x, tensor.from_numpy(np.zeros((4, 2, 1, 1, 1))), padding=(0, 2, 0, 0, 1, 0))


@pytest.mark.gpu
def test_3d_gpu_matches_cpu():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 4, 3, 4, 3)).astype(np.float32)
    w = rng.standard_normal((4, 3, 2, 3, 2)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    assert_gpu_matches_cpu(
        lambda a, f, c: conv_transpose3d(a, f, c, 2, (1, 0, 1, 0, 1, 1), 1, (1, 2, 1), 2), [x, w, b]
    )
