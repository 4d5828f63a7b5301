"""singa.kernels.jit: which arrays the float kernels take."""

import numpy as np

from singa.kernels import jit


def test_float_kernels_take_numpy_float32_and_float64_arrays_of_one_dtype():
    a32, b32 = np.zeros(3, np.float32), np.ones((2, 2), np.float32)
    assert jit.takes_floats(a32) and jit.takes_floats(a32, b32)
    assert jit.takes_floats(np.zeros(2))  # float64
    assert not jit.takes_floats(a32, np.zeros(2))  # mixed dtypes
    assert not jit.takes_floats(np.zeros(2, np.float16))  # numba has no float16
    assert not jit.takes_floats(np.zeros(2, np.int32))
    sub = type("Sub", (np.ndarray,), {})
    assert not jit.takes_floats(np.zeros(2, np.float32).view(sub))  # a subclass: array expressions


@jit.helper
def _twice_plus(a, b):
    return 2 * a + b


@jit.kernel
def _apply_twice_plus(x, out):  # pragma: no cover (compiled)
    for i in range(x.size):
        out[i] = _twice_plus(x[i], 1.0)


def test_a_helper_is_compiled_into_the_kernels_that_call_it_and_stays_plain_python():
    x, out = np.arange(4.0), np.empty(4)
    _apply_twice_plus(x, out)
    np.testing.assert_array_equal(out, 2 * x + 1)
    assert _twice_plus(3.0, 1.0) == 7.0 and type(_twice_plus).__name__ == "function"
