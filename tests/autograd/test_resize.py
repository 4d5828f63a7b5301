"""upsample: nearest and linear values against direct per-element formulas, integer
and fractional scales, float64 gradients, SINGA's class form, errors."""

import itertools
import math

import numpy as np
import pytest

from singa import autograd
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
