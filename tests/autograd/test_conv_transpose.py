"""conv_transpose2d: gradient checks and a forward check against a direct loop."""

from __future__ import annotations

import numpy as np
import pytest

from singa import tensor
from singa.autograd.conv_transpose import conv_transpose2d
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
