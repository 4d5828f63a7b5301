"""BLAS thread counts per product shape: the policy, the limit inside the block and its
restoration, and products that equal numpy's."""

import numpy as np
import pytest

from singa.kernels import blas_threads as bt

threadpoolctl = pytest.importorskip("threadpoolctl")


def blas():
    """The BLAS singa limits (the first found when it was first asked for: in a full test
    run another BLAS, scipy's, may be loaded later and listed first)."""
    lib = bt.controller()
    if lib is None:
        pytest.skip("threadpoolctl finds no BLAS to control")
    return lib


def test_policy_limits_only_skinny_products_with_enough_work():
    assert bt.threads_for(26, 32, 36864) == 1  # conv1's weight gradient in the MNIST CNN
    assert bt.threads_for(64, 10, 2000) == 1  # a classifier (N, 2000) @ (2000, 10)
    assert bt.threads_for(64, 500, 1024) is None  # wide: BLAS's own setting
    assert bt.threads_for(64, 10, 100) is None  # too small to be worth a switch
    assert bt.threads_for(2048, 33, 4096) is None


def test_limit_holds_inside_the_block_and_is_restored():
    lib = blas()
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        before = lib.get_num_threads()
        with bt.product_threads(np, 26, 32, 36864):
            assert lib.get_num_threads() == 1
        assert lib.get_num_threads() == before
        with bt.product_threads(np, 512, 512, 512):
            assert lib.get_num_threads() == before
        with pytest.raises(RuntimeError):
            with bt.product_threads(np, 26, 32, 36864):
                raise RuntimeError("restored on errors too")
        assert lib.get_num_threads() == before


def test_a_limit_nested_in_a_stricter_one_does_not_ask_blas(monkeypatch):
    """Inside limit(1), limit(1) and limit(2) hold BLAS at one thread without querying
    it; the outer block restores the count."""
    lib = blas()
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        before = lib.get_num_threads()
        with bt.limit(1):
            asked = []
            real = type(lib).get_num_threads
            monkeypatch.setattr(type(lib), "get_num_threads", lambda self: asked.append(1) or real(self))
            with bt.limit(1), bt.limit(2):
                assert real(lib) == 1
            assert asked == []
            monkeypatch.undo()
        assert lib.get_num_threads() == before


@pytest.mark.parametrize(
    "sa, sb",
    [((26, 36864), (36864, 32)), ((64, 1024), (1024, 500)), ((3, 40, 9000), (9000, 8)), ((9000,), (9000, 8))],
)
def test_products_equal_numpy_bitwise(sa, sb):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    limited = bt.threads_for(a.shape[-2] if a.ndim > 1 else 1, b.shape[-1], a.shape[-1]) == 1
    with threadpoolctl.threadpool_limits(1 if limited else None, user_api="blas"):
        expect = a @ b  # thread counts can change the bits of a product
    np.testing.assert_array_equal(bt.matmul(a, b), expect)
    out = np.empty_like(expect)
    assert bt.matmul(a, b, out=out) is out
    np.testing.assert_array_equal(out, expect)


def test_the_controller_is_numpys_own_blas_when_another_is_loaded_first():
    from types import SimpleNamespace

    from singa.kernels.blas_threads import _numpys_own

    scipy_blas = SimpleNamespace(filepath="/x/site-packages/scipy.libs/libopenblas.so")
    numpy_blas = SimpleNamespace(filepath="/x/site-packages/numpy.libs/libscipy_openblas64_.so")
    system_blas = SimpleNamespace(filepath="/usr/lib/libopenblas.so.0")
    assert _numpys_own([scipy_blas, numpy_blas]) is numpy_blas
    assert _numpys_own([system_blas]) is system_blas
    assert _numpys_own([]) is None
