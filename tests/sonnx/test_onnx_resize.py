"""ONNX export (checked by onnxruntime) and import (checked against onnxruntime) of
Resize in the forms the ONNX node cases do not cover together: sizes with axes,
keep_aspect_ratio_policy, antialias, and the opsets before and after 18."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from sonnx_helpers import (
    bilinear,
    check_export,
    op_types,
    ort_node_model,
    rand,
    roundtrip,
    run_node_model,
)

from singa import autograd, sonnx, tensor


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize(
    ("mode", "ctm"), [("linear", "pytorch_half_pixel"), ("nearest", "asymmetric"), ("cubic", "align_corners")]
)
def test_resample_exports_and_runs_in_onnxruntime(opset, mode, ctm):
    def fn(x):
        return autograd.resample(
            x, sizes=[x.shape[0], 2, 7, 5], mode=mode, coordinate_transformation_mode=ctm
        )

    model = check_export(fn, lambda b: [rand((b, 2, 4, 4))], opset=opset)
    assert "Resize" in op_types(model)


def test_antialias_export_needs_opset_18():
    from singa import tensor

    x = tensor.from_numpy(rand((1, 1, 8, 8)))
    with pytest.raises(sonnx.ExportError, match="antialias needs opset 18"):
        sonnx.to_onnx(
            [x], lambda t: autograd.resample(t, sizes=[1, 1, 3, 3], mode="linear", antialias=True), opset=17
        )


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_resize_with_axes_and_aspect_policy_imports_like_onnxruntime(policy):
    x = rand((1, 2, 5, 7))
    ins = {
        "x": x,
        "c_roi": np.zeros(0, np.float32),
        "c_scales": np.zeros(0, np.float32),
        "c_sizes": np.array([4, 4]),
    }
    kw = {"mode": "linear", "axes": [2, 3], "keep_aspect_ratio_policy": policy, "antialias": 1}
    (got,) = run_node_model("Resize", ins, **kw)
    (want,) = ort_node_model("Resize", ins, **kw)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-5)


pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.mark.parametrize(
    ("mode", "scales"), [("nearest", [1, 1, 2, 3]), ("linear", [1, 1, 2, 2]), ("nearest", [1, 1, 1.5, 2.5])]
)
@pytest.mark.parametrize("opset", [11, 17])
def test_upsample_is_resize(mode, scales, opset):
    model = roundtrip(
        lambda x: autograd.upsample(x, mode, scales), lambda b: [rand((b, 2, 3, 4))], opset=opset
    )
    assert "Resize" in op_types(model)


def test_onnx_upsample_node_imports_as_upsample():
    """An opset-9 Upsample node (scales as an input) in an opset-11 graph's terms is not
    valid ONNX, so the handler is checked directly on a node context."""
    from singa.sonnx.context import NodeContext
    from singa.sonnx.families.resize import handle_upsample

    x = tensor.from_numpy(np.arange(6, dtype=np.float32).reshape(1, 1, 2, 3))
    node = onnx.helper.make_node("Upsample", ["x", "s"], ["y"], mode="nearest")
    ctx = NodeContext(node, 9, x.device, False)
    y = handle_upsample(ctx, [x, tensor.from_numpy(np.array([1, 1, 2, 2], np.float32))])
    np.testing.assert_array_equal(y.to_numpy()[0, 0], np.repeat(np.repeat(x.to_numpy()[0, 0], 2, 0), 2, 1))
    node7 = onnx.helper.make_node("Upsample", ["x"], ["y"], mode="linear", scales=[1.0, 1.0, 2.0, 1.0])
    y = handle_upsample(NodeContext(node7, 7, x.device, False), [x])
    np.testing.assert_allclose(y.to_numpy()[0, 0, :, 0], [0, 1.5, 3, 3])


# ----- AffineGrid -------------------------------------------------------------------------------
@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_matches_formula_and_gradcheck(align):
    from sonnx_helpers import handler_fn

    from singa.autograd.gradcheck import gradcheck

    theta = np.random.default_rng(0).standard_normal((2, 2, 3)).astype(np.float32)
    (got,) = run_node_model(
        "AffineGrid", {"t": theta, "c_s": np.array([2, 1, 3, 4])}, opset=20, align_corners=align
    )
    xs = np.linspace(-1, 1, 4) if align else (2 * np.arange(4) + 1) / 4 - 1
    ys = np.linspace(-1, 1, 3) if align else (2 * np.arange(3) + 1) / 3 - 1
    base = np.stack([*np.meshgrid(xs, ys), np.ones((3, 4))], -1)  # (H, W, [x, y, 1])
    want = np.einsum("hwk,njk->nhwj", base, theta)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    fn = handler_fn("AffineGrid", opset=20, n_inputs=2, align_corners=align)
    gradcheck(fn, [theta.astype(np.float64), np.array([2, 1, 3, 4])], wrt=[0])


# ----- GridSample ---------------------------------------------------------------------------------
def _bilinear_zeros(img, gx, gy):
    """Bilinear sampling of a 2-D image at normalised (gx, gy), align_corners=0, zero padding."""
    h, w = img.shape
    return bilinear(img, ((gy + 1) * h - 1) / 2, ((gx + 1) * w - 1) / 2)


def test_grid_sample_bilinear_matches_loops_and_gradcheck():
    from sonnx_helpers import handler_fn

    from singa.autograd.gradcheck import gradcheck

    rng = np.random.default_rng(0)
    img = rng.standard_normal((1, 2, 4, 5))
    grid = rng.uniform(-1.2, 1.2, (1, 3, 2, 2))
    (got,) = run_node_model("GridSample", {"x": img, "c_g": grid}, opset=20)
    want = np.array(
        [
            [
                [[_bilinear_zeros(img[0, c], *grid[0, i, j]) for j in range(2)] for i in range(3)]
                for c in range(2)
            ]
        ]
    )
    np.testing.assert_allclose(got, want, rtol=1e-12)
    gradcheck(
        handler_fn("GridSample", opset=20, n_inputs=2, mode="cubic", padding_mode="reflection"),
        [img, grid],
        wrt=[0],
    )


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_matches_torch(mode, padding, align):
    try:
        import torch
    except Exception:
        pytest.skip("torch is not importable")
    rng = np.random.default_rng(1)
    img = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    grid = rng.uniform(-1.3, 1.3, (2, 3, 6, 2)).astype(np.float32)
    onnx_mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    (got,) = run_node_model(
        "GridSample",
        {"x": img, "c_g": grid},
        opset=20,
        mode=onnx_mode,
        padding_mode=padding,
        align_corners=int(align),
    )
    want = torch.nn.functional.grid_sample(
        torch.from_numpy(img), torch.from_numpy(grid), mode, padding, align
    )
    np.testing.assert_allclose(got, want.numpy(), atol=1e-4)
