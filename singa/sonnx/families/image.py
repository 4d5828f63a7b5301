"""Images: ONNX ImageDecoder (opset 20), computed when the node runs with Pillow (a
dependency of the package, also used by ``singa.data.ImageFolder``), as ONNX's
reference decodes. Inference-only: the output is uint8 pixels, without a gradient.
"""

from __future__ import annotations

import io

import numpy as np

from singa.sonnx.context import NodeContext, builds
from singa.tensor import Tensor

FORMATS = ("RGB", "BGR", "Grayscale")


@builds()
def handle_image_decoder(ctx: NodeContext, xs: list) -> Tensor:
    """ImageDecoder(encoded; pixel_format): the 1-D uint8 bytes of an image file (JPEG,
    PNG, BMP, TIFF, WebP, PNM, JPEG 2000: what Pillow reads) decoded to (H, W, 3) uint8
    pixels in ``pixel_format`` RGB or BGR, or (H, W, 1) for Grayscale."""
    from PIL import Image, UnidentifiedImageError  # a dependency; imported when used

    fmt = ctx.attr("pixel_format", "RGB")
    if fmt not in FORMATS:
        raise ctx.unsupported(f"pixel_format {fmt!r} (one of {', '.join(FORMATS)})")
    data = np.asarray(ctx.static(xs[0]), np.uint8).tobytes()
    try:
        img = Image.open(io.BytesIO(data))
        img = img.convert("L" if fmt == "Grayscale" else "RGB")
    except (UnidentifiedImageError, OSError) as e:
        raise ValueError(f"ONNX run: ImageDecoder node {ctx.name!r}: cannot decode the image ({e})") from e
    pixels = np.asarray(img, np.uint8)
    if fmt == "Grayscale":
        pixels = pixels[:, :, None]
    elif fmt == "BGR":
        pixels = pixels[:, :, ::-1]
    return ctx.const(np.ascontiguousarray(pixels))


EXPORT: dict = {}
IMPORT = {"ImageDecoder": handle_image_decoder}
