"""Large matrix products in blocks on the workers (singa.kernels.products)."""

from __future__ import annotations

import numpy as np
import pytest

from singa import autograd, tensor
from singa.autograd.gradcheck import gradcheck
from singa.kernels import blas_threads, products, workers


@pytest.fixture
def small_split(monkeypatch):
    """Split every product of at least 64 multiply-adds (the real threshold needs
    products too large for a quick test)."""
    monkeypatch.setattr(products, "SPLIT_MACS", 64)


def _count_pieces(monkeypatch) -> list:
    seen: list = []
    real = workers.run_pieces

    def counting(fn, pieces, xp=np):
        seen.append(len(pieces))
        return real(fn, pieces, xp)

    monkeypatch.setattr(workers, "run_pieces", counting)
    return seen


@pytest.mark.parametrize("shape", [(37, 11, 5), (5, 11, 37), (40, 9, 40)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blocks_give_the_product(small_split, monkeypatch, shape, dtype):
    m, k, n = shape
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    seen = _count_pieces(monkeypatch)
    got = products.matmul(a, b)
    assert seen and seen[0] >= 2  # really cut into blocks
    assert got.shape == (m, n) and got.dtype == dtype
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_out_is_filled_and_returned(small_split):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((30, 8)), rng.standard_normal((8, 12))
    out = np.full((30, 12), np.nan)
    assert products.matmul(a, b, out=out) is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-12)


def test_out_overlapping_an_operand_runs_whole(small_split, monkeypatch):
    """Blocks writing into an operand that other blocks still read would race."""
    seen = _count_pieces(monkeypatch)
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((24, 24)), rng.standard_normal((24, 24))
    want = a @ b
    np.testing.assert_allclose(products.matmul(a, b, out=a), want, rtol=1e-12)
    assert seen == []


def test_transposed_operands(small_split):
    """Views with any strides (a weight gradient multiplies ``x.T``)."""
    rng = np.random.default_rng(2)
    x, dy = rng.standard_normal((50, 30)), rng.standard_normal((50, 7))
    np.testing.assert_allclose(products.matmul(x.T, dy), x.T @ dy, rtol=1e-12)


def test_bits_do_not_depend_on_the_worker_count(small_split, monkeypatch):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 300)).astype(np.float32)
    b = rng.standard_normal((300, 90)).astype(np.float32)
    runs = []
    for count in (1, 2, 3):
        monkeypatch.setattr(workers, "_count", [count])
        runs.append(products.matmul(a, b))
    for run in runs[1:]:
        np.testing.assert_array_equal(run, runs[0])


def test_small_and_unusual_products_run_whole(monkeypatch):
    seen = _count_pieces(monkeypatch)
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
    np.testing.assert_allclose(products.matmul(a, b), a @ b, rtol=1e-6)  # below SPLIT_MACS
    monkeypatch.setattr(products, "SPLIT_MACS", 1)
    stack = rng.standard_normal((3, 8, 8))
    np.testing.assert_allclose(products.matmul(stack, b), stack @ b, rtol=1e-6)  # 3-D
    ints = np.arange(64).reshape(8, 8)
    np.testing.assert_array_equal(products.matmul(ints, ints), ints @ ints)  # not float
    b64 = b.astype(np.float64)
    np.testing.assert_allclose(products.matmul(a, b64), a @ b64, rtol=1e-6)  # mixed: numpy's float64 product
    assert seen == []


def test_blocks_depend_only_on_the_shape():
    unit = products.BLOCK_MACS
    assert products.block_count(products.SPLIT_MACS) == 2
    assert products.block_count(unit) == 2
    assert products.block_count(2 * unit - 1) == 2
    assert products.block_count(2 * unit) == 4
    assert products.block_count(1000 * unit) == 8


def test_matmul_operator_gradients_through_blocks(small_split, monkeypatch):
    monkeypatch.setattr(workers, "_count", [2])
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((12, 9)), rng.standard_normal((9, 10))
    ta = tensor.Tensor(data=a, requires_grad=True)
    tb = tensor.Tensor(data=b, requires_grad=True)
    np.testing.assert_allclose(autograd.matmul(ta, tb).to_numpy(), a @ b, rtol=1e-5, atol=1e-5)
    gradcheck(autograd.matmul, [a, b])


def test_blas_fallback_is_used_below_the_threshold(monkeypatch):
    calls = []
    real = blas_threads.matmul
    monkeypatch.setattr(blas_threads, "matmul", lambda a, b, out=None: calls.append(1) or real(a, b, out=out))
    a = np.ones((4, 4), np.float32)
    products.matmul(a, a)
    assert calls == [1]


def test_a_stack_times_a_matrix_is_one_product_of_the_rows(small_split, monkeypatch):
    """(..., m, k) @ (k, n), also with ``a`` a transposed view (numpy's stacked matmul
    would loop without BLAS): one split product of the stacked rows."""
    seen = _count_pieces(monkeypatch)
    rng = np.random.default_rng(7)
    a = rng.standard_normal((3, 8, 5, 6)).astype(np.float32).transpose(0, 2, 3, 1)
    b = rng.standard_normal((8, 4)).astype(np.float32)
    got = products.matmul(a, b)
    assert got.shape == (3, 5, 6, 4) and seen and seen[0] >= 2
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_matmuls_run_whole_products_side_by_side_with_the_same_bits(small_split, monkeypatch):
    monkeypatch.setattr(products, "BLOCK_MACS", 64)  # several blocks each
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 20, 9)).astype(np.float32)  # a stack times one matrix
    w = rng.standard_normal((9, 11)).astype(np.float32)
    dy = rng.standard_normal((3, 20, 11)).astype(np.float32)
    pairs = [(dy, w.T), (x.reshape(-1, 9).T, dy.reshape(-1, 11)), (np.ones((2, 2)), np.ones((2, 2)))]
    with blas_threads.limit(1):  # each whole, on one BLAS thread, as a worker runs it
        whole = [np.matmul(a.reshape(-1, a.shape[-1]), b) for a, b in pairs]
    want = [w_.reshape(*a.shape[:-1], b.shape[-1]) for w_, (a, b) in zip(whole, pairs)]
    seen = _count_pieces(monkeypatch)
    got = products.matmuls(pairs)
    assert seen == [3]  # one hand-off, one piece per product
    for g, w_ in zip(got, want):
        assert g.shape == w_.shape
        np.testing.assert_array_equal(g, w_)
    np.testing.assert_allclose(got[0], dy @ w.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], x.reshape(-1, 9).T @ dy.reshape(-1, 11), rtol=1e-5, atol=1e-5)


def test_deep_products_run_whole_and_beside_the_blocks(small_split, monkeypatch):
    """A product whose inner dimension dwarfs its result (a weight gradient) is not cut
    (each block would pack the whole other operand); matmuls runs it whole beside the
    other product, and a lone product as matmul does."""
    monkeypatch.setattr(products, "BLOCK_MACS", 64)
    rng = np.random.default_rng(8)
    x = rng.standard_normal((200, 8)).astype(np.float32)
    dy = rng.standard_normal((200, 6)).astype(np.float32)
    w = rng.standard_normal((8, 6)).astype(np.float32)
    seen = _count_pieces(monkeypatch)
    deep = products.matmul(x.T, dy)  # (8, 200) @ (200, 6): 200 > 4 * 8
    assert seen == []
    np.testing.assert_array_equal(deep, x.T @ dy)
    dx, dw = products.matmuls([(dy, w.T), (x.T, dy)])
    assert seen == [2]
    np.testing.assert_array_equal(dw, deep)
    np.testing.assert_array_equal(dx, products.matmul(dy, w.T))
    seen.clear()
    (alone,) = products.matmuls([(dy, w.T)])
    assert seen == [products.block_count(200 * 6 * 8)]  # blocks, as matmul cuts it
    np.testing.assert_array_equal(alone, dx)


def test_deep_products_with_a_long_side_run_as_two_inner_halves(small_split, monkeypatch):
    """A deep product whose result has a side of at least 2 * DEEP_MIN_SIDE (a
    convolution of many channels on few pixels) runs as two products over the halves
    of its inner dimension, side by side, then added: numpy's product to rounding, the
    same bits on one worker or two; a shorter one still runs whole, with numpy's bits."""
    monkeypatch.setattr(products, "BLOCK_MACS", 64)
    monkeypatch.setattr(products, "DEEP_MIN_SIDE", 8)
    rng = np.random.default_rng(9)
    seen = _count_pieces(monkeypatch)
    for m, k, n in ((16, 101, 6), (6, 100, 16)):
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        got = products.matmul(a, b)
        np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
        half = (k + 1) // 2
        np.testing.assert_array_equal(got, a[:, :half] @ b[:half] + a[:, half:] @ b[half:])
        before = workers.worker_count()
        workers.set_worker_count(1)
        try:
            np.testing.assert_array_equal(products.matmul(a, b), got)
        finally:
            workers.set_worker_count(before)
    assert seen[:1] == [2] and seen.count(2) >= 2
    seen.clear()
    a = rng.standard_normal((15, 100)).astype(np.float32)
    b = rng.standard_normal((100, 6)).astype(np.float32)
    np.testing.assert_array_equal(products.matmul(a, b), a @ b)  # 15 < 2 * 8: whole
    assert seen == []
