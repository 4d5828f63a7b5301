"""The compiled count of correct predictions (singa.kernels.classification) equals
numpy's argmax rule, ties and NaNs included, and the accuracy metric uses it."""

import numpy as np
import pytest

from singa import metrics
from singa.kernels.classification import count_correct


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("label_dtype", [np.int32, np.int64, np.uint8])
def test_count_equals_numpy_argmax(dtype, label_dtype):
    rng = np.random.default_rng(0)
    out = rng.integers(-2, 3, (500, 7)).astype(dtype)  # many ties: the first largest wins
    out[::17, 3] = np.nan  # the first NaN wins, as in numpy
    out[::23, 0] = np.nan
    out[::29, 5] = -np.inf
    labels = rng.integers(0, 7, 500).astype(label_dtype)
    labels[::3] = out[::3].argmax(axis=1)  # enough hits to count
    want = int(np.count_nonzero(out.argmax(axis=1) == labels))
    assert count_correct(out, labels) == want
    view = np.asfortranarray(out)[:, ::-1]  # any strides
    assert count_correct(view, labels) == int(np.count_nonzero(view.argmax(axis=1) == labels))


def test_accuracy_takes_the_kernel_and_numpy_alike():
    rng = np.random.default_rng(1)
    out = rng.standard_normal((64, 10))
    y = rng.integers(0, 10, 64)
    want = np.mean(out.argmax(1) == y)
    for o in (out, out.astype(np.float32), out.astype(np.float16)):  # float16: numpy's path
        m = metrics.Accuracy()
        m.update(o, y)
        m.update(o[:5], y[:5])
        assert m.result() == pytest.approx((want * 64 + np.sum(o[:5].argmax(1) == y[:5])) / 69, abs=0)
    assert count_correct(np.zeros((0, 3), np.float32), np.zeros(0, np.int64)) == 0
