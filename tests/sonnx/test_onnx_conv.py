"""Convolutions: ONNX export checked by onnxruntime at two batch sizes (and, where
the test says so, imported back with ``sonnx.prepare`` and run against our output)."""

from __future__ import annotations

from sonnx_helpers import check_export, param, rand

from singa import autograd


def test_conv_functional_asymmetric_padding_groups_dilation():
    w = param(rand((4, 2, 3, 3), seed=15), "w")
    check_export(lambda x: autograd.conv2d(x, w, None, 2, (0, 1, 2, 0), 2, 2), img(4))


def img(c):
    return lambda n: [rand((n, c, 5, 6))]
