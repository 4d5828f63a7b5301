"""DFT, STFT and window functions: values against numpy's FFT and formulas; DFT
gradients in float64 (it is built of autograd products)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator
from sonnx_helpers import handler_fn, node_model, run_node_model

from singa.autograd.gradcheck import gradcheck

RNG = np.random.default_rng(0)


@pytest.mark.parametrize(("inverse", "onesided", "complex_in"), [(0, 0, 0), (0, 1, 0), (1, 0, 1), (0, 0, 1)])
def test_dft_matches_numpy_fft(inverse, onesided, complex_in):
    x = RNG.standard_normal((2, 8, 2 if complex_in else 1))
    z = x[..., 0] + 1j * x[..., 1] if complex_in else x[..., 0]
    (got,) = run_node_model("DFT", {"x": x}, opset=17, axis=1, inverse=inverse, onesided=onesided)
    want = np.fft.ifft(z, axis=1) if inverse else np.fft.fft(z, axis=1)
    if onesided:
        want = want[:, :5]
    np.testing.assert_allclose(got, np.stack([want.real, want.imag], -1), atol=1e-12)
    gradcheck(handler_fn("DFT", opset=17, axis=1, inverse=inverse, onesided=onesided), [x])


def test_dft_length_and_irfft():
    x = RNG.standard_normal((1, 6, 1))
    (got,) = run_node_model("DFT", {"x": x, "c_n": np.int64(8), "c_a": np.int64(1)}, opset=20)
    want = np.fft.fft(x[..., 0], n=8, axis=1)
    np.testing.assert_allclose(got, np.stack([want.real, want.imag], -1), atol=1e-12)
    spec = np.fft.rfft(RNG.standard_normal((1, 8)), axis=1)
    s = np.stack([spec.real, spec.imag], -1)
    (back,) = run_node_model("DFT", {"x": s}, opset=17, axis=1, inverse=1, onesided=1)
    np.testing.assert_allclose(back[..., 0], np.fft.irfft(spec, n=8, axis=1), atol=1e-12)


def test_stft_frames_windows_and_transforms():
    x = RNG.standard_normal((1, 20, 1)).astype(np.float32)
    win = np.hanning(8).astype(np.float32)
    (got,) = run_node_model("STFT", {"x": x, "c_step": np.int64(4), "c_w": win}, opset=17)
    frames = np.stack([x[0, i * 4 : i * 4 + 8, 0] * win for i in range(4)])
    want = np.fft.rfft(frames, axis=1)
    np.testing.assert_allclose(got[0], np.stack([want.real, want.imag], -1), atol=1e-5)


@pytest.mark.parametrize(
    ("op", "numpy_fn"), [("HannWindow", np.hanning), ("HammingWindow", None), ("BlackmanWindow", np.blackman)]
)
def test_symmetric_windows(op, numpy_fn):
    (got,) = run_node_model(op, {"c_n": np.int64(9)}, opset=17, periodic=0)
    if numpy_fn is None:  # ONNX's Hamming uses alpha = 25/46
        n = np.arange(9)
        want = 25 / 46 - 21 / 46 * np.cos(2 * np.pi * n / 8)
    else:
        want = numpy_fn(9)
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_mel_weight_matrix_is_triangles_between_mel_spaced_bins():
    inputs = {
        "c_bins": np.int64(8),
        "c_n": np.int64(64),
        "c_rate": np.int64(16000),
        "c_low": np.float32(100),
        "c_high": np.float32(6000),
    }
    (got,) = run_node_model("MelWeightMatrix", inputs, opset=17, output_datatype=11)
    assert got.shape == (33, 8) and got.dtype == np.float64
    # the edges: mel-spaced frequencies rounded down to DFT bins; each filter rises to 1 at its centre
    mel = lambda f: 2595 * np.log10(1 + f / 700)  # noqa: E731
    hz = 700 * (10 ** (np.linspace(mel(100), mel(6000), 10, endpoint=False) / 2595) - 1)
    edges = (65 * hz // 16000).astype(int)
    for i in range(8):
        lo, mid, hi = edges[i : i + 3]
        assert got[mid, i] == 1
        np.testing.assert_allclose(got[lo : mid + 1, i], np.linspace(0, 1, mid - lo + 1) if mid > lo else [1])
        assert (got[:lo, i] == 0).all() and (got[hi:, i] == 0).all()
    (ref,) = ReferenceEvaluator(node_model("MelWeightMatrix", inputs, opset=17, output_datatype=11)).run(
        None, {}
    )
    np.testing.assert_array_equal(got, ref)
