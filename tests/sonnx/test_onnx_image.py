"""ImageDecoder: images written with Pillow decode to their pixels (lossless formats
exactly), in RGB, BGR and grayscale; bytes that are not an image are named."""

from __future__ import annotations

import io

import numpy as np
import pytest
from sonnx_helpers import run_node_model

Image = pytest.importorskip("PIL.Image")


def _encoded(pixels: np.ndarray, fmt: str) -> np.ndarray:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=fmt)
    return np.frombuffer(buf.getvalue(), np.uint8)


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "TIFF"])
def test_lossless_images_decode_to_their_pixels(fmt):
    pixels = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    data = _encoded(pixels, fmt)
    (rgb,) = run_node_model("ImageDecoder", {"x": data}, opset=20)
    np.testing.assert_array_equal(rgb, pixels)
    (bgr,) = run_node_model("ImageDecoder", {"x": data}, opset=20, pixel_format="BGR")
    np.testing.assert_array_equal(bgr, pixels[:, :, ::-1])
    (gray,) = run_node_model("ImageDecoder", {"x": data}, opset=20, pixel_format="Grayscale")
    assert gray.shape == (5, 7, 1) and gray.dtype == np.uint8
    # ITU-R 601-2 luma, Pillow's L conversion: (299 R + 587 G + 114 B) / 1000, rounded
    want = (pixels.astype(np.int64) @ [19595, 38470, 7471] + 0x8000) >> 16
    np.testing.assert_array_equal(gray[:, :, 0], want)


def test_bytes_that_are_not_an_image_are_named():
    with pytest.raises(ValueError, match=r"ImageDecoder node .*cannot decode the image"):
        run_node_model("ImageDecoder", {"x": np.frombuffer(b"not an image", np.uint8)}, opset=20)
