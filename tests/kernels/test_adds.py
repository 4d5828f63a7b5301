"""singa.kernels.adds: a + b on the workers, bit for bit numpy's, and numpy's own way
for every case the kernels do not take."""

import numpy as np
import pytest

from singa.kernels import adds, workers

N = adds.MIN_SIZE * 4


def _values(shape, dtype, seed):
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    flat[:6] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-45 if dtype == np.float32 else 5e-324]
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("workers_", [1, 2])
def test_same_shape_gives_numpys_bits_into_a_new_array_or_either_input(dtype, workers_):
    a, b = _values((8, N // 8), dtype, 0), _values((8, N // 8), dtype, 1)
    want = a + b
    workers.set_worker_count(workers_)
    try:
        out = np.empty_like(a)
        assert adds.add(a, b, out)
        np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))
        a1, b1 = a.copy(), b.copy()
        assert adds.add(a1, b1, a1) and adds.add(a, b1, b1)
        np.testing.assert_array_equal(a1.view(np.uint8), want.view(np.uint8))
        np.testing.assert_array_equal(b1.view(np.uint8), want.view(np.uint8))
    finally:
        workers.set_worker_count(None)


@pytest.mark.parametrize("bshape", [(64,), (1, 64), (1, 1, 64), (16, 64)])
def test_a_row_or_a_trailing_block_is_added_to_every_row(bshape):
    a = _values((N // 1024, 16, 64), np.float32, 2)
    b = _values(bshape, np.float32, 3)
    out = np.empty_like(a)
    assert adds.add(a, b, out)
    np.testing.assert_array_equal(out.view(np.uint8), (a + b).view(np.uint8))
    np.testing.assert_array_equal(adds.added(a, b).view(np.uint8), (a + b).view(np.uint8))
    a1 = a.copy()
    assert adds.add(a1, b, a1)  # in place: a kernel of its own
    np.testing.assert_array_equal(a1.view(np.uint8), (a + b).view(np.uint8))


def test_in_place_adds_keep_the_operands_order_for_nan_payloads():
    """a + b takes a's NaN payload when both are NaN (x86 and numpy alike); the in-place
    kernels keep that order whichever operand they write into."""
    a = np.full(N, np.nan, np.float32)
    b = a.copy()
    a.view(np.uint32)[:] |= 1  # a quiet NaN with another payload
    want = a + b
    a1, b1 = a.copy(), b.copy()
    assert adds.add(a1, b, a1) and adds.add(a, b1, b1)
    np.testing.assert_array_equal(a1.view(np.uint32), want.view(np.uint32))
    np.testing.assert_array_equal(b1.view(np.uint32), want.view(np.uint32))


def test_arrays_laid_out_alike_but_not_in_c_order_are_added_in_memory_order():
    a, b = (_values((8, 16, 16, 32), np.float64, k).transpose(0, 3, 1, 2) for k in (4, 5))  # channels last
    out = np.empty_like(a)
    assert out.strides == a.strides and adds.add(a, b, out)
    np.testing.assert_array_equal(out, a + b)
    gaps = a[:, :, ::2], b[:, :, ::2]
    out = np.empty_like(gaps[0])
    assert adds.add(*gaps, out)  # not dense: numpy's add, in pieces
    np.testing.assert_array_equal(out, gaps[0] + gaps[1])


def test_operands_laid_out_differently_take_numpy_in_pieces_on_the_workers(monkeypatch):
    """A gradient sum where a strided convolution's dx (a crop of a padded NHWC array)
    meets an NHWC one: numpy's add over pieces of the first axis, numpy's bits."""
    a = _values((32, 32, 32, 16), np.float32, 6).transpose(0, 3, 1, 2)
    b = _values((32, 34, 34, 16), np.float32, 7)[:, 1:-1, 1:-1, :].transpose(0, 3, 1, 2)
    want = a + b
    sizes = []
    run = workers.run_pieces
    monkeypatch.setattr(
        workers, "run_pieces", lambda fn, pieces: sizes.append(len(pieces)) or run(fn, pieces)
    )
    assert adds.add(a, b, a) and sizes[0] >= 2
    np.testing.assert_array_equal(a, want)


@pytest.mark.parametrize(
    "a, b, out",
    [
        (np.ones(8, np.float32), np.ones(8, np.float32), np.empty(8, np.float32)),  # small
        (np.ones(N, np.float16), np.ones(N, np.float16), np.empty(N, np.float16)),  # no float16 kernels
        (np.ones(N, np.int64), np.ones(N, np.int64), np.empty(N, np.int64)),
        (np.ones(N, np.float32), np.ones(N, np.float64), np.empty(N, np.float64)),  # mixed dtypes
        (
            np.ones((N // 8, 8), np.float32),
            np.ones((N // 8, 1), np.float32),
            np.empty((N // 8, 8), np.float32),
        ),  # noqa: E501  (a column)
        (np.ones(N, np.float32), np.ones(N, np.float32), np.empty(N + 1, np.float32)),  # shapes differ
    ],
)
def test_cases_the_kernels_do_not_take_are_left_untouched_for_numpy(a, b, out):
    before = out.copy()
    assert not adds.add(a, b, out)
    np.testing.assert_array_equal(out[: min(out.size, 4)], before[: min(out.size, 4)])


def test_an_output_overlapping_an_input_is_refused():
    buf = np.ones(N + 1, np.float32)
    assert not adds.add(buf[1:], buf[1:].copy(), buf[:-1])


def test_added_falls_back_to_numpy_and_keeps_its_broadcasting():
    col = np.arange(4.0).reshape(4, 1)
    row = np.arange(N // 4, dtype=np.float64)
    np.testing.assert_array_equal(adds.added(col, row), col + row)  # the larger operand second
    assert adds.added(np.float32(1), np.float32(2)) == 3


def test_a_large_add_is_cut_into_pieces_for_the_workers(monkeypatch):
    seen = []
    real = workers.run_pieces

    def counting(fn, pieces, xp=np):
        seen.append(len(pieces))
        return real(fn, pieces, xp)

    monkeypatch.setattr(workers, "run_pieces", counting)
    a = np.ones((workers.PIECE_WORK // 64, 256), np.float32)
    assert adds.add(a, np.ones(256, np.float32), a)
    assert adds.add(a, a.copy(), a)
    assert len(seen) == 2 and min(seen) > 1
    np.testing.assert_array_equal(a, 4.0)


def test_an_operand_overlapping_out_is_left_to_numpy():
    """Pieces on two workers would race where one writes what the other reads."""
    x = np.arange(N + 1, dtype=np.float32)
    head, tail = x[:-1], x[1:]
    assert not adds.add(head, tail, head)
    assert not adds.add(tail, head, head)
    rows = head.reshape(2, -1)
    assert not adds.add(rows, tail.reshape(2, -1)[:, ::-1], rows)
    np.testing.assert_array_equal(x, np.arange(N + 1, dtype=np.float32))  # nothing written


def test_operands_laid_out_differently_take_numpy_add_and_added_keeps_the_layout():
    a = np.ascontiguousarray(_values((8, 16, 16, 32), np.float32, 6).transpose(0, 3, 1, 2))  # C order
    b = _values((8, 16, 16, 32), np.float32, 7).transpose(0, 3, 1, 2)  # channels last
    out = a.copy()
    assert adds.add(a, b, out)
    np.testing.assert_array_equal(out, a + b)
    out = adds.added(b, b)
    assert out.strides == b.strides  # numpy's b + b keeps b's layout, and so does added
    np.testing.assert_array_equal(out, b + b)
