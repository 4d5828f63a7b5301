"""depth_to_space and space_to_depth: values against ONNX's reference formulas (both
modes), inverse pairs, float64 gradients, errors."""

import numpy as np
import pytest

from singa import autograd
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor


def T(a):
    a = np.asarray(a)
    return Tensor(data=a, dtype=a.dtype, requires_grad=True, stores_grad=True)


def d2s_reference(x, b, mode):
    """ONNX's DepthToSpace definition (its operator documentation)."""
    n, c, h, w = x.shape
    if mode == "DCR":
        t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return t.reshape(n, c // (b * b), h * b, w * b)


def s2d_reference(x, b):
    """ONNX's SpaceToDepth definition."""
    n, c, h, w = x.shape
    t = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return t.reshape(n, c * b * b, h // b, w // b)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("b", [1, 2, 3])
def test_depth_to_space_matches_onnx_and_inverts(mode, b):
    x = np.arange(2 * 2 * b * b * 3 * 2, dtype=np.float32).reshape(2, 2 * b * b, 3, 2)
    y = autograd.depth_to_space(T(x), b, mode)
    np.testing.assert_array_equal(y.to_numpy(), d2s_reference(x, b, mode))
    back = autograd.space_to_depth(y, b, mode)
    np.testing.assert_array_equal(back.to_numpy(), x)


def test_space_to_depth_dcr_matches_onnx():
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 6))
    np.testing.assert_array_equal(autograd.space_to_depth(T(x), 2).to_numpy(), s2d_reference(x, 2))


def test_singa_crd_example_values():
    x = np.arange(16, dtype=np.float32).reshape(1, 4, 2, 2)
    y = autograd.DepthToSpace(2, "CRD")(T(x))[0]
    np.testing.assert_array_equal(y.to_numpy()[0, 0, 0], [0, 4, 1, 5])
    dx = y.creator.backward(y.data)  # the gradient of a permutation undoes it
    np.testing.assert_array_equal(dx, x)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_gradients(mode):
    rng = np.random.default_rng(1)
    gradcheck(lambda t: autograd.depth_to_space(t, 2, mode), [rng.standard_normal((2, 8, 2, 3))])
    gradcheck(lambda t: autograd.space_to_depth(t, 2, mode), [rng.standard_normal((2, 2, 4, 2))])


def test_errors():
    with pytest.raises(
        ValueError, match=r"^depth_to_space: channels 6 are not divisible by blocksize\^2 = 4"
    ):
        autograd.depth_to_space(T(np.zeros((1, 6, 2, 2))), 2)
    with pytest.raises(ValueError, match=r"^space_to_depth: H and W of \(1, 1, 3, 2\) are not divisible"):
        autograd.space_to_depth(T(np.zeros((1, 1, 3, 2))), 2)
    with pytest.raises(ValueError, match=r"^depth_to_space: mode must be 'DCR' or 'CRD'"):
        autograd.depth_to_space(T(np.zeros((1, 4, 2, 2))), 2, "XYZ")
    with pytest.raises(ValueError, match=r"^space_to_depth: needs an \(N, C, H, W\) tensor"):
        autograd.space_to_depth(T(np.zeros((4, 2, 2))), 2)


# ----- col2im ----------------------------------------------------------------------------------
def _fold(cols, image, block, stride, pad, dil):
    """Col2Im written with loops over block positions and kernel offsets (2-D)."""
    n, ck, _ = cols.shape
    c = ck // (block[0] * block[1])
    h, w = image[0] + pad[0] + pad[2], image[1] + pad[1] + pad[3]
    gh = (h - dil[0] * (block[0] - 1) - 1) // stride[0] + 1
    gw = (w - dil[1] * (block[1] - 1) - 1) // stride[1] + 1
    out = np.zeros((n, c, h, w))
    cols = cols.reshape(n, c, block[0], block[1], gh, gw)
    for i in range(gh):
        for j in range(gw):
            for ki in range(block[0]):
                for kj in range(block[1]):
                    out[:, :, i * stride[0] + ki * dil[0], j * stride[1] + kj * dil[1]] += cols[
                        :, :, ki, kj, i, j
                    ]
    return out[:, :, pad[0] : pad[0] + image[0], pad[1] : pad[1] + image[1]]


@pytest.mark.parametrize(
    ("stride", "pad", "dil"), [((1, 1), (0, 0, 0, 0), (1, 1)), ((2, 1), (1, 0, 1, 2), (1, 2))]
)
def test_col2im_matches_loops_and_gradcheck(stride, pad, dil):
    image, block = (5, 4), (2, 3)
    h, w = image[0] + pad[0] + pad[2], image[1] + pad[1] + pad[3]
    grid = ((h - dil[0] * (block[0] - 1) - 1) // stride[0] + 1) * (
        (w - dil[1] * (block[1] - 1) - 1) // stride[1] + 1
    )
    cols = np.random.default_rng(0).standard_normal((2, 2 * 6, grid))
    got = autograd.col2im(T(cols), image, block, stride, pad, dil).to_numpy()
    np.testing.assert_allclose(got, _fold(cols, image, block, stride, pad, dil), rtol=1e-12)
    gradcheck(lambda t: autograd.col2im(t, image, block, stride, pad, dil), [cols])


def test_col2im_shape_error():
    with pytest.raises(ValueError, match="col2im: needs"):
        autograd.col2im(T(np.zeros((1, 4, 3))), (3, 3), (2, 2))
