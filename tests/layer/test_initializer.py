"""singa.initializer: distribution statistics, fans, bounds and reproducibility."""

import math

import numpy as np
import pytest

from singa import device, initializer
from singa.tensor import Tensor

SHAPE = (400, 300)  # fan_in 400, fan_out 300 (SINGA's (in, out) convention)


def fresh(shape=SHAPE, dtype=np.float32):
    return Tensor(shape, dtype=dtype, requires_grad=True, stores_grad=True)


@pytest.fixture(autouse=True)
def seeded():
    device.get_default_device().set_rand_seed(1234)


def check_uniform(a, bound):
    """Within bounds, reaching them, mean and std within 5 standard errors."""
    n, std = a.size, bound / math.sqrt(3)
    assert a.min() >= -bound and a.max() <= bound
    assert a.max() > 0.98 * bound and a.min() < -0.98 * bound
    assert abs(a.mean()) < 5 * std / math.sqrt(n)
    assert abs(a.std() - std) < 5 * std * math.sqrt(0.2 / n)  # SE of a uniform sample std


def check_normal(a, std):
    n = a.size
    assert abs(a.mean()) < 5 * std / math.sqrt(n)
    assert abs(a.std() - std) < 5 * std / math.sqrt(2 * n)


def test_compute_fans():
    assert initializer.compute_fans((4, 5)) == (4, 5)
    assert initializer.compute_fans((8, 3, 3, 3)) == (27, 72)
    assert initializer.compute_fans((7,)) == (7, 7)


@pytest.mark.parametrize(
    "fn,bound",
    [
        (initializer.he_uniform, math.sqrt(6 / 400)),
        (initializer.glorot_uniform, math.sqrt(6 / 700)),
        (initializer.lecun_uniform, math.sqrt(3 / 400)),
        (initializer.xavier_uniform, math.sqrt(6 / 700)),
        (lambda t: initializer.kaiming_uniform(t, a=math.sqrt(5)), 1 / math.sqrt(400)),
        (lambda t: initializer.kaiming_uniform(t, nonlinearity="relu"), math.sqrt(6 / 400)),
        (lambda t: initializer.kaiming_uniform(t, mode="fan_out", nonlinearity="relu"), math.sqrt(6 / 300)),
        (lambda t: initializer.xavier_uniform(t, gain=2.0), 2 * math.sqrt(6 / 700)),
        (lambda t: initializer.uniform(t, 400, 0), math.sqrt(3 / 400)),
        (lambda t: initializer.uniform(t, 400, 300), math.sqrt(6 / 700)),
        (initializer.xavier, math.sqrt(6 / 700)),
    ],
)
def test_uniform_initializers(fn, bound):
    t = fresh()
    assert fn(t) is t
    check_uniform(t.to_numpy(), bound)


@pytest.mark.parametrize(
    "fn,std",
    [
        (initializer.he_normal, math.sqrt(2 / 400)),
        (initializer.glorot_normal, math.sqrt(2 / 700)),
        (initializer.lecun_normal, math.sqrt(1 / 400)),
        (initializer.xavier_normal, math.sqrt(2 / 700)),
        (lambda t: initializer.kaiming_normal(t, nonlinearity="relu"), math.sqrt(2 / 400)),
        (lambda t: initializer.gaussian(t, 400, 0), math.sqrt(2 / 400)),
        (lambda t: initializer.gaussian(t, 400, 300), math.sqrt(4 / 700)),
        (lambda t: initializer.normal(t, 0.0, 0.5), 0.5),
        (initializer.glorot, math.sqrt(2 / 700)),
        (initializer.msra, math.sqrt(2 / 400)),
    ],
)
def test_normal_initializers(fn, std):
    t = fresh()
    fn(t)
    check_normal(t.to_numpy(), std)


def test_explicit_fans_override_the_shape():
    t = fresh((300, 400))  # e.g. a transposed weight whose fan_in is shape[1]
    initializer.he_uniform(t, fan_in=400)
    check_uniform(t.to_numpy(), math.sqrt(6 / 400))
    initializer.kaiming_uniform(t, a=math.sqrt(5), fan_in=400)
    check_uniform(t.to_numpy(), 1 / math.sqrt(400))


def test_conv_kernel_fans():
    t = fresh((64, 16, 3, 3))
    initializer.he_normal(t)
    check_normal(t.to_numpy(), math.sqrt(2 / (16 * 9)))


def test_constants_eye_orthogonal():
    t = fresh((3, 4))
    np.testing.assert_array_equal(initializer.constant(t, 2.5).to_numpy(), 2.5)
    np.testing.assert_array_equal(initializer.zeros(t).to_numpy(), 0)
    np.testing.assert_array_equal(initializer.ones(t).to_numpy(), 1)
    np.testing.assert_array_equal(initializer.eye(t).to_numpy(), np.eye(3, 4))
    with pytest.raises(ValueError, match="2-D"):
        initializer.eye(fresh((2, 2, 2)))
    for shape in [(5, 3), (3, 5), (4, 2, 3)]:
        q = initializer.orthogonal(fresh(shape, np.float64), gain=2.0).to_numpy().reshape(shape[0], -1)
        small = min(q.shape)
        gram = q.T @ q if q.shape[0] >= q.shape[1] else q @ q.T
        np.testing.assert_allclose(gram, 4 * np.eye(small), atol=1e-12)


def test_errors():
    with pytest.raises(ValueError, match="cannot both be 0"):
        initializer.uniform(fresh())
    with pytest.raises(ValueError, match="mode"):
        initializer.kaiming_uniform(fresh(), mode="fan_sum")
    with pytest.raises(ValueError, match="nonlinearity"):
        initializer.calculate_gain("swish")
    assert initializer.calculate_gain("tanh") == pytest.approx(5 / 3)


def test_reproducible_with_device_seed_and_dtype_kept():
    dev = device.get_default_device()
    dev.set_rand_seed(42)
    a = initializer.he_uniform(fresh()).to_numpy()
    b = initializer.glorot_normal(fresh()).to_numpy()
    dev.set_rand_seed(42)
    np.testing.assert_array_equal(initializer.he_uniform(fresh()).to_numpy(), a)
    np.testing.assert_array_equal(initializer.glorot_normal(fresh()).to_numpy(), b)
    assert not np.array_equal(initializer.he_uniform(fresh()).to_numpy(), a)
    assert initializer.orthogonal(fresh((4, 4))).dtype == np.float32
    assert initializer.he_normal(fresh(dtype=np.float64)).dtype == np.float64
