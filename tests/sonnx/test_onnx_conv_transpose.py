"""Transposed convolutions: ONNX export checked by onnxruntime at two batch sizes (and, where
the test says so, imported back with ``sonnx.prepare`` and run against our output)."""

from __future__ import annotations

from sonnx_helpers import check_export, op_types, param, rand

from singa.autograd.conv_transpose import conv_transpose2d


def test_conv_transpose_variants():
    w = param(rand((3, 2, 3, 3), seed=10), "w")
    m = check_export(lambda x: conv_transpose2d(x, w, None, stride=2, padding=1, output_padding=1), img(3))
    assert op_types(m) == ["ConvTranspose"]
    wg = param(rand((4, 1, 2, 2), seed=11), "wg")
    check_export(lambda x: conv_transpose2d(x, wg, None, stride=(1, 2), dilation=2, groups=2), img(4))
    wb = param(rand((3, 4, 3, 3), seed=12), "wb")
    b = param(rand((4,), seed=9), "b")
    check_export(lambda x: conv_transpose2d(x, wb, b, stride=2, padding=(1, 0, 0, 1)), img(3))


def img(c):
    return lambda n: [rand((n, c, 5, 6))]
