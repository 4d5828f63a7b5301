"""upsample: nearest and linear values against direct per-element formulas, integer
and fractional scales, float64 gradients, SINGA's class form, errors."""

import itertools
import math

import numpy as np
import pytest

from singa import autograd, tensor
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor


def T(a):
    a = np.asarray(a)
    return Tensor(data=a, dtype=a.dtype, requires_grad=True, stores_grad=True)


def reference(x, mode, scales):
    """Every output element computed on its own: coordinate i / scale per axis,
    nearest = floor, linear = blend of the two neighbours (the last one repeats)."""
    out_shape = tuple(int(math.floor(n * s)) for n, s in zip(x.shape, scales))
    y = np.zeros(out_shape)
    for idx in itertools.product(*[range(m) for m in out_shape]):
        terms = []
        for i, n, s in zip(idx, x.shape, scales):
            c = i / s
            lo = min(int(math.floor(c)), n - 1)
            if mode == "nearest":
                terms.append([(lo, 1.0)])
            else:
                f = c - lo
                terms.append([(lo, 1 - f), (min(lo + 1, n - 1), f)])
        y[idx] = sum(
            x[tuple(p for p, _ in combo)] * math.prod(w for _, w in combo)
            for combo in itertools.product(*terms)
        )
    return y


CASES = [
    ("nearest", [1, 1, 2, 3]),
    ("nearest", [1, 1, 1.5, 2.5]),
    ("linear", [1, 1, 2, 2]),
    ("linear", [1, 2, 1.5, 3]),
    ("nearest", [2, 1]),
]


@pytest.mark.parametrize(("mode", "scales"), CASES)
def test_values_match_the_per_element_formula(mode, scales):
    shape = (2, 3, 2, 3)[-len(scales) :] if len(scales) == 4 else (3, 2)
    x = np.random.default_rng(0).standard_normal(shape)
    y = autograd.upsample(T(x), mode, scales)
    np.testing.assert_allclose(y.to_numpy(), reference(x, mode, scales), rtol=1e-12, atol=1e-12)


def test_singa_nearest_example():
    x = np.array([[[[1, 2], [3, 4]]]], dtype=np.float32)
    y = autograd.UpSample("nearest", [1.0, 1.0, 2.0, 3.0])(T(x))[0]
    want = [[1, 1, 1, 2, 2, 2], [1, 1, 1, 2, 2, 2], [3, 3, 3, 4, 4, 4], [3, 3, 3, 4, 4, 4]]
    np.testing.assert_array_equal(y.to_numpy()[0, 0], want)
    np.testing.assert_array_equal(
        y.creator.backward(np.ones((1, 1, 4, 6), np.float32)), np.full((1, 1, 2, 2), 6)
    )


@pytest.mark.parametrize(("mode", "scales"), CASES)
def test_gradients(mode, scales):
    shape = (1, 2, 2, 3) if len(scales) == 4 else (3, 2)
    gradcheck(lambda t: autograd.upsample(t, mode, scales), [np.random.default_rng(2).standard_normal(shape)])


def test_integer_tensor_nearest_keeps_dtype():
    x = Tensor(data=np.array([[1, 2]], np.int32), dtype=np.int32)
    y = autograd.upsample(x, "NEAREST", [1, 2])
    assert y.dtype == np.int32 and y.to_numpy().tolist() == [[1, 1, 2, 2]]


def test_errors():
    x = T(np.zeros((1, 2)))
    with pytest.raises(ValueError, match=r"^upsample: mode must be 'nearest' or 'linear', got 'cubic'"):
        autograd.upsample(x, "cubic", [1, 2])
    with pytest.raises(ValueError, match=r"^upsample: needs one scale >= 1 per axis"):
        autograd.upsample(x, "nearest", [1, 0.5])
    with pytest.raises(ValueError, match=r"^upsample: needs one scale >= 1 per axis"):
        autograd.upsample(x, "nearest", [2])
    with pytest.raises(ValueError, match=r"^upsample: linear mode needs a floating-point tensor"):
        autograd.upsample(Tensor(data=np.zeros((1, 2), np.int64), dtype=np.int64), "linear", [1, 2])


# ----- resample (ONNX Resize) ------------------------------------------------------------------
def _bilinear_align_corners(a, out_h, out_w):
    """Bilinear interpolation with corners aligned, written out with loops."""
    h, w = a.shape
    y = np.zeros((out_h, out_w))
    for i in range(out_h):
        for j in range(out_w):
            sy = i * (h - 1) / (out_h - 1)
            sx = j * (w - 1) / (out_w - 1)
            y0, x0 = int(np.floor(sy)), int(np.floor(sx))
            y1, x1 = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
            fy, fx = sy - y0, sx - x0
            top = a[y0, x0] * (1 - fx) + a[y0, x1] * fx
            bot = a[y1, x0] * (1 - fx) + a[y1, x1] * fx
            y[i, j] = top * (1 - fy) + bot * fy
    return y


def test_resample_linear_align_corners_matches_loops():
    a = np.random.default_rng(0).standard_normal((3, 4))
    t = tensor.from_numpy(a)
    got = autograd.resample(t, sizes=[5, 7], mode="linear", coordinate_transformation_mode="align_corners")
    np.testing.assert_allclose(got.to_numpy(), _bilinear_align_corners(a, 5, 7), rtol=1e-12)


def test_resample_nearest_half_pixel_downsamples_by_picking():
    a = np.arange(16.0).reshape(1, 1, 4, 4)
    got = autograd.resample(tensor.from_numpy(a), scales=[1, 1, 0.5, 0.5]).to_numpy()
    # half_pixel: output i reads (i + 0.5) * 2 - 0.5 = 0.5, 2.5 -> rounds (prefer floor) to 0, 2
    np.testing.assert_array_equal(got[0, 0], a[0, 0][[0, 2]][:, [0, 2]])


def test_resample_crop_extrapolates_outside_the_region():
    a = np.arange(4.0).reshape(1, 4)
    got = autograd.resample(
        tensor.from_numpy(a),
        sizes=[1, 3],
        mode="linear",
        coordinate_transformation_mode="tf_crop_and_resize",
        roi=[0, 0.5, 1, 1.5],
        extrapolation_value=-9.0,
    ).to_numpy()
    # x = 1.5 + j * 1.5: 1.5 (interpolated), 3.0 (the last element), 4.5 (outside)
    np.testing.assert_allclose(got, [[1.5, 3.0, -9.0]])


@pytest.mark.parametrize(
    ("mode", "ctm", "extra"),
    [
        ("linear", "half_pixel", {}),
        ("cubic", "pytorch_half_pixel", {"exclude_outside": True}),
        ("linear", "asymmetric", {"antialias": True}),
        ("cubic", "half_pixel", {"antialias": True}),
        ("nearest", "align_corners", {"nearest_mode": "ceil"}),
        ("linear", "tf_crop_and_resize", {"roi": [0, 0, 0.2, 1, 1, 1.3]}),
    ],
)
def test_resample_float64_gradients(mode, ctm, extra):
    x = np.random.default_rng(1).standard_normal((2, 4, 5))
    gradcheck(
        lambda t: autograd.resample(
            t, sizes=[2, 3, 7], mode=mode, coordinate_transformation_mode=ctm, **extra
        ),
        [x],
    )


def test_resample_matches_torch_interpolate():
    try:
        import torch
    except Exception:
        pytest.skip("torch is not importable")
    a = np.random.default_rng(2).standard_normal((1, 2, 5, 6)).astype(np.float32)
    got = autograd.resample(
        tensor.from_numpy(a),
        sizes=[1, 2, 9, 4],
        mode="cubic",
        coordinate_transformation_mode="pytorch_half_pixel",
    )
    want = torch.nn.functional.interpolate(
        torch.from_numpy(a), size=(9, 4), mode="bicubic", align_corners=False
    )
    np.testing.assert_allclose(got.to_numpy(), want.numpy(), atol=1e-5)


def test_resample_argument_errors():
    t = tensor.from_numpy(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="resample: mode"):
        autograd.resample(t, sizes=[2, 3], mode="area")
    with pytest.raises(ValueError, match="resample: needs one size"):
        autograd.resample(t, sizes=[2])
    with pytest.raises(ValueError, match="tf_crop_and_resize needs a roi"):
        autograd.resample(t, sizes=[2, 3], coordinate_transformation_mode="tf_crop_and_resize")
