"""einsum: forward against numpy's einsum, float64 gradients, errors."""

import numpy as np
import pytest

from singa import autograd
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor


def Tensor_(data):
    a = np.asarray(data)
    return Tensor(data=a, dtype=a.dtype, requires_grad=False)


rng = np.random.default_rng(0)
CASES = [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ij", [(3, 4)]),  # implicit output: the transpose is not taken (alphabetical)
    ("i,i", [(5,), (5,)]),
    ("...ij,...jk", [(2, 3, 4), (4, 2)]),
    ("ij->", [(3, 4)]),
    ("ijk->i", [(2, 3, 4)]),
]


@pytest.mark.parametrize(("eq", "shapes"), CASES)
def test_einsum_forward_and_gradient(eq, shapes):
    xs = [rng.standard_normal(s) for s in shapes]
    got = autograd.einsum(eq, *[Tensor_(x) for x in xs]).to_numpy()
    np.testing.assert_allclose(got, np.einsum(eq, *xs), rtol=1e-12)
    gradcheck(lambda *ts: autograd.einsum(eq, *ts), xs)


def test_diagonal_is_computed_not_differentiated_and_errors():
    x = rng.standard_normal((3, 3))
    np.testing.assert_allclose(autograd.einsum("ii->i", Tensor_(x)).to_numpy(), np.diag(x))
    with pytest.raises(ValueError, match="einsum: subscript 'j' has sizes"):
        autograd.einsum("ij,jk", Tensor_(np.zeros((2, 3))), Tensor_(np.zeros((4, 2))))
    with pytest.raises(ValueError, match="einsum: equation 'ij,jk' has 2 operands"):
        autograd.einsum("ij,jk", Tensor_(np.zeros((2, 3))))
