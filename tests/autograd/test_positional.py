"""Positions: slice_like (forward, float64 gradient, errors) and the sinusoidal table."""

import numpy as np
import pytest

from singa import autograd
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor

rng = np.random.default_rng(0)


def const(a):
    a = np.asarray(a)
    return Tensor(data=a, dtype=a.dtype, requires_grad=False)


def test_slice_like_forward_and_gradcheck():
    table, x = rng.standard_normal((7, 3)), rng.standard_normal((2, 4, 3))
    y = autograd.slice_like(const(table), const(x), 0, 1).to_numpy()
    np.testing.assert_array_equal(y, table[:4])
    gradcheck(lambda a, b: autograd.slice_like(a, b, 0, 1), [table, x], wrt=[0])
    y = autograd.slice_like(const(table), const(x), 1, -1).to_numpy()
    np.testing.assert_array_equal(y, table[:, :3])


def test_slice_like_errors():
    with pytest.raises(ValueError, match="longer than the table"):
        autograd.slice_like(const(np.zeros((3, 2))), const(np.zeros((1, 4, 2))), 0, 1)
    with pytest.raises(ValueError, match="out of range"):
        autograd.slice_like(const(np.zeros((3, 2))), const(np.zeros((1, 2))), 2, 1)


def test_sinusoidal_table_formula():
    tab = autograd.sinusoidal_table(6, 5, dtype=np.float64)
    for pos in range(6):
        for i in range(5):
            angle = pos / 10000 ** ((i - i % 2) / 5)
            want = np.sin(angle) if i % 2 == 0 else np.cos(angle)
            assert abs(tab[pos, i] - want) < 1e-12
