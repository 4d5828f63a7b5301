"""ONNX export of slice_like: the length comes from the sequence at run time, checked
by onnxruntime and our importer at two batch sizes and two lengths."""

import numpy as np
from test_onnx_attention import check_dynamic

from singa import autograd, tensor


def test_slice_like_follows_the_sequence_length():
    table = tensor.from_numpy(np.arange(24, dtype=np.float32).reshape(8, 3))

    def fn(x):
        return autograd.add(x, autograd.slice_like(table, x, 0, 1))

    check_dynamic(fn, lambda b, s: [np.random.default_rng(s).standard_normal((b, s, 3)).astype(np.float32)])
