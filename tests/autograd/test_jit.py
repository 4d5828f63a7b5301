"""singa.autograd.jit: which arrays the float kernels take."""

import numpy as np

from singa.autograd import jit


def test_float_kernels_take_numpy_float32_and_float64_arrays_of_one_dtype():
    a32, b32 = np.zeros(3, np.float32), np.ones((2, 2), np.float32)
    assert jit.takes_floats(a32) and jit.takes_floats(a32, b32)
    assert jit.takes_floats(np.zeros(2))  # float64
    assert not jit.takes_floats(a32, np.zeros(2))  # mixed dtypes
    assert not jit.takes_floats(np.zeros(2, np.float16))  # numba has no float16
    assert not jit.takes_floats(np.zeros(2, np.int32))
    sub = type("Sub", (np.ndarray,), {})
    assert not jit.takes_floats(np.zeros(2, np.float32).view(sub))  # a subclass: array expressions
