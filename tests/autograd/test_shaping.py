"""Shape operators: reshape, flatten, transpose, cat, split, slice, squeeze,
unsqueeze, pad, expand, tile."""

import numpy as np
import pytest
from gpu_compare import assert_gpu_matches_cpu  # noqa: I001

from singa import autograd
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor

rng = np.random.default_rng(0)


def const(a, dtype=np.float64):
    return Tensor(data=np.asarray(a), dtype=dtype, requires_grad=False)


def randn(*shape):
    return rng.standard_normal(shape)


# ----- reshape, flatten, transpose ----------------------------------------------------------
@pytest.mark.parametrize(
    "shape,new,expect",
    [
        ((2, 3, 4), (6, 4), (6, 4)),
        ((2, 3, 4), (-1,), (24,)),
        ((2, 3, 4), (0, -1), (2, 12)),
        ((6,), (3, 2), (3, 2)),
    ],
)
def test_reshape(shape, new, expect):
    x = randn(*shape)
    y = autograd.reshape(const(x), new)
    assert y.shape == expect
    np.testing.assert_array_equal(y.to_numpy(), x.reshape(expect))
    gradcheck(lambda x: autograd.reshape(x, new), [x])


def test_tensor_reshape_method_and_errors():
    x = const(randn(2, 6))
    assert x.reshape(3, 4).shape == (3, 4) and x.reshape((4, 3)).shape == (4, 3)
    for bad in [(5, 3), (-1, -1), (0, 0, 0, 12), (-2, -6)]:
        with pytest.raises(ValueError, match=r"reshape.*\(2, 6\)"):
            autograd.reshape(x, bad)


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
def test_flatten(axis):
    x = randn(2, 3, 2, 2)
    a = axis + 4 if axis < 0 else axis
    expect = x.reshape(int(np.prod(x.shape[:a])), -1)
    y = autograd.flatten(const(x), axis)
    assert y.shape == expect.shape
    np.testing.assert_array_equal(y.to_numpy(), expect)
    gradcheck(lambda x: autograd.flatten(x, axis), [x])


def test_flatten_default_and_error():
    assert autograd.flatten(const(np.ones((4, 2, 3, 3)))).shape == (4, 18)
    with pytest.raises(ValueError, match="flatten"):
        autograd.flatten(const(np.ones((2, 3))), 3)


@pytest.mark.parametrize("perm", [None, (1, 0, 2), (2, 0, 1), (-1, 0, 1)])
def test_transpose(perm):
    x = randn(2, 3, 4)
    y = autograd.transpose(const(x), perm)
    np.testing.assert_array_equal(y.to_numpy(), np.transpose(x, perm))
    gradcheck(lambda x: autograd.transpose(x, perm), [x])
    if perm is None:
        np.testing.assert_array_equal(const(x).T().to_numpy(), x.T)


def test_transpose_error():
    with pytest.raises(ValueError, match="transpose"):
        autograd.transpose(const(np.ones((2, 3))), (0, 0))


# ----- cat and split -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "shapes,axis", [([(2, 3), (4, 3)], 0), ([(2, 1, 2), (2, 3, 2), (2, 2, 2)], 1), ([(2, 3), (2, 2)], -1)]
)
def test_cat(shapes, axis):
    xs = [randn(*s) for s in shapes]
    y = autograd.cat([const(x) for x in xs], axis)
    np.testing.assert_array_equal(y.to_numpy(), np.concatenate(xs, axis))
    gradcheck(lambda *ts: autograd.cat(ts, axis), xs)


def test_cat_with_constant_input_and_errors():
    a, b = randn(2, 3), randn(2, 3)
    gradcheck(lambda a, b: autograd.cat((a, b), 1), [a, b], wrt=[1])
    with pytest.raises(ValueError, match="cat"):
        autograd.cat([const(np.ones((2, 3))), const(np.ones((3, 2)))], 0)
    with pytest.raises(ValueError, match="cat"):
        autograd.cat([const(np.ones((2, 3))), const(np.ones((2, 3, 1)))], 0)
    with pytest.raises(ValueError, match="cat"):
        autograd.cat([const(np.ones((2, 3)))], 2)


@pytest.mark.parametrize("axis,parts", [(0, 3), (1, [1, 3, 1]), (-1, [2, 3]), (1, 5), (0, [6])])
def test_split(axis, parts):
    x = randn(6, 5)
    ys = autograd.split(const(x), axis, parts)
    assert isinstance(ys, tuple)
    idx = np.cumsum(parts)[:-1] if isinstance(parts, list) else parts
    for y, e in zip(ys, np.split(x, idx, axis), strict=True):
        np.testing.assert_array_equal(y.to_numpy(), e)

    def total(x):
        out = autograd.split(x, axis, parts)
        return autograd.cat([autograd.mul(o, o) for o in out], axis)

    gradcheck(total, [x])


def test_split_with_unused_outputs():
    x = randn(4, 6)
    # only the middle piece is used: the others get zero gradient
    gradcheck(lambda x: autograd.split(x, 1, [1, 2, 3])[1], [x])
    xt = Tensor(data=x, dtype=np.float64, requires_grad=True, stores_grad=True)
    g = autograd.gradients(autograd.split(xt, 1, [1, 2, 3])[2], dy=np.ones((4, 3)))[xt].to_numpy()
    np.testing.assert_array_equal(g, np.concatenate([np.zeros((4, 3)), np.ones((4, 3))], 1))


@pytest.mark.parametrize("axis,parts", [(0, 4), (0, [3, 2]), (2, 2), (1, [-1, 7]), (1, 0)])
def test_split_errors(axis, parts):
    with pytest.raises(ValueError, match="split"):
        autograd.split(const(np.ones((6, 6))), axis, parts)


# ----- slice -------------------------------------------------------------------------------
SLICES = [
    # starts, ends, axes, steps, numpy key on a (4, 5, 6) array
    ([1], [3], None, None, np.s_[1:3]),
    ([0, 1], [4, -1], [0, 2], [2, 2], np.s_[0:4:2, :, 1:-1:2]),
    ([-1], [-100], [1], [-1], np.s_[:, ::-1]),  # negative step, end clamped before 0
    ([10, -3], [-10, 100], [2, 0], [-2, 1], np.s_[-3:, :, ::-2]),  # start clamped to dim - 1
    ([2], [1000], [-1], None, np.s_[:, :, 2:]),
    ([3], [1], [0], [-1], np.s_[3:1:-1]),
    ([3], [3], [1], None, np.s_[:, 3:3]),  # empty result
]


@pytest.mark.parametrize("starts,ends,axes,steps,key", SLICES)
def test_slice(starts, ends, axes, steps, key):
    x = randn(4, 5, 6)
    y = autograd.slice(const(x), starts, ends, axes, steps)
    np.testing.assert_array_equal(y.to_numpy(), x[key])
    gradcheck(lambda x: autograd.slice(x, starts, ends, axes, steps), [x])


def test_slice_errors():
    x = const(np.ones((3, 4)))
    with pytest.raises(ValueError, match="slice"):
        autograd.slice(x, [0], [1], [2])
    with pytest.raises(ValueError, match="slice"):
        autograd.slice(x, [0, 0], [1], [0])
    with pytest.raises(ValueError, match="slice"):
        autograd.slice(x, [0], [1], [0], [0])
    with pytest.raises(ValueError, match="slice"):
        autograd.slice(x, [0, 0], [1, 1], [0, -2])


# ----- squeeze, unsqueeze --------------------------------------------------------------------
@pytest.mark.parametrize("axis,expect", [(None, (3, 2)), (0, (3, 1, 2)), ([0, -2], (3, 2)), (2, (1, 3, 2))])
def test_squeeze(axis, expect):
    x = randn(1, 3, 1, 2)
    y = autograd.squeeze(const(x), axis)
    assert y.shape == expect
    np.testing.assert_array_equal(y.to_numpy(), x.reshape(expect))
    gradcheck(lambda x: autograd.squeeze(x, axis), [x])
    with pytest.raises(ValueError, match="squeeze"):
        autograd.squeeze(const(x), 1)


@pytest.mark.parametrize(
    "axis,expect", [(0, (1, 3, 2)), (-1, (3, 2, 1)), ([0, 3], (1, 3, 2, 1)), ([1, -2], (3, 1, 1, 2))]
)
def test_unsqueeze(axis, expect):
    x = randn(3, 2)
    y = autograd.unsqueeze(const(x), axis)
    assert y.shape == expect
    np.testing.assert_array_equal(y.to_numpy(), x.reshape(expect))
    gradcheck(lambda x: autograd.unsqueeze(x, axis), [x])


def test_unsqueeze_errors():
    with pytest.raises(ValueError, match="unsqueeze"):
        autograd.unsqueeze(const(np.ones((3, 2))), 3)
    with pytest.raises(ValueError, match="unsqueeze"):
        autograd.unsqueeze(const(np.ones((3, 2))), [1, 1])


# ----- pad ------------------------------------------------------------------------------------
def _np_pad(x, mode, pads, constant):
    r = x.ndim
    crop = tuple(slice(max(-b, 0), d - max(-e, 0)) for b, e, d in zip(pads[:r], pads[r:], x.shape))
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(pads[:r], pads[r:])]
    kw = {"constant_values": constant} if mode == "constant" else {}
    return np.pad(x[crop], widths, mode=mode, **kw)


PADS = [
    (3, 4),
    [1, 2, 2, 1],
    (2, 3, 4),
    [0, 1, 2, 1, 0, 3],
    (2, 1, 3, 4),
    [0, 0, 1, 2, 0, 0, 2, 3],
    (3, 4),
    [-1, 1, 2, -2],  # negative pads crop
    (5,),
    [4, 6],  # reflect wider than the input (repeated mirroring)
]
PADS = list(zip(PADS[::2], PADS[1::2]))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("shape,pads", PADS)
def test_pad(mode, shape, pads):
    x = randn(*shape)
    y = autograd.pad(const(x), mode, pads, 1.5)
    np.testing.assert_array_equal(y.to_numpy(), _np_pad(x, mode, pads, 1.5))
    gradcheck(lambda x: autograd.pad(x, mode, pads, 1.5), [x])


def test_pad_reflect_closed_form():
    x = np.array([1.0, 2.0, 3.0])
    y = autograd.pad(const(x), "reflect", [2, 1]).to_numpy()
    np.testing.assert_array_equal(y, [3, 2, 1, 2, 3, 2])
    y = autograd.pad(const(x), "edge", [2, 1]).to_numpy()
    np.testing.assert_array_equal(y, [1, 1, 1, 2, 3, 3])
    xt = Tensor(data=x, dtype=np.float64, requires_grad=True, stores_grad=True)
    g = autograd.gradients(autograd.pad(xt, "reflect", [2, 1]), dy=np.ones(6))[xt].to_numpy()
    np.testing.assert_array_equal(g, [1, 3, 2])


@pytest.mark.parametrize("mode", ["reflect", "edge"])
@pytest.mark.parametrize(
    "shape,pads",
    [
        ((2, 3, 9, 11), [0, 1, 3, 1, 0, 2, 8, 12]),  # one reflection (up to n - 1), wider on axis 3
        ((2, 2, 4, 5), [0, 0, 9, 1, 0, 1, 11, 13]),  # repeated mirroring on both padded axes
        ((3, 2, 6), [1, -1, 1, 2, 0, 1]),  # single positions and a crop
    ],
)
def test_pad_gradcheck_larger_inputs(mode, shape, pads):
    x = randn(*shape)
    gradcheck(lambda x: autograd.pad(x, mode, pads), [x])


@pytest.mark.parametrize("mode", ["reflect", "edge"])
@pytest.mark.parametrize("pads", [[0, 0, 3, 3, 0, 0, 3, 3], [0, 0, 1, 40, 0, 0, 70, 2]])
def test_pad_backward_matches_index_map_on_a_large_float32_input(mode, pads):
    # every output element copies one input element: dx is dy summed onto its source
    x = np.random.default_rng(3).standard_normal((4, 8, 32, 24)).astype(np.float32)
    xt = Tensor(data=x, dtype=np.float32, requires_grad=True, stores_grad=True)
    y = autograd.pad(xt, mode, pads)
    dy = np.random.default_rng(4).standard_normal(y.shape).astype(np.float32)
    dx = autograd.gradients(y, dy=dy)[xt].to_numpy()
    src = _np_pad(np.arange(x.size).reshape(x.shape), mode, pads, 0)
    want = np.bincount(src.ravel(), weights=dy.astype(np.float64).ravel(), minlength=x.size)
    assert dx.dtype == np.float32
    np.testing.assert_allclose(dx, want.reshape(x.shape), rtol=1e-5, atol=1e-4)


def test_pad_errors():
    x = const(np.ones((2, 3)))
    with pytest.raises(ValueError, match="pad"):
        autograd.pad(x, "constant", [1, 1])
    with pytest.raises(ValueError, match="pad"):
        autograd.pad(x, "wrap", [1, 1, 1, 1])
    with pytest.raises(ValueError, match="pad"):
        autograd.pad(x, "constant", [-2, 0, -1, 0])
    with pytest.raises(ValueError, match="pad"):
        autograd.pad(x, "reflect", [1, 0, -2, 0])  # nothing left to reflect


# ----- tile ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "shape,repeats",
    [
        ((2, 3), (2, 3)),
        ((2, 3), 2),  # an int: the last axis
        ((2, 3, 4), (3, 1)),  # fewer entries: the last axes
        ((3,), (2, 1, 2)),  # more entries: leading axes added
        ((1, 2, 3), (1, 1, 1)),
    ],
)
def test_tile_matches_numpy_and_gradcheck(shape, repeats):
    x = randn(*shape)
    y = autograd.tile(const(x), repeats)
    np.testing.assert_array_equal(y.to_numpy(), np.tile(x, repeats))
    gradcheck(lambda x: autograd.tile(x, repeats), [x])


def test_tile_gradient_sums_the_copies():
    xt = Tensor(data=np.array([[1.0, 2.0]]), dtype=np.float64, requires_grad=True, stores_grad=True)
    dy = np.arange(12.0).reshape(2, 6)  # 2 x 3 copies of a (1, 2) input
    g = autograd.gradients(autograd.tile(xt, (2, 3)), dy=dy)[xt].to_numpy()
    np.testing.assert_array_equal(g, dy.reshape(2, 1, 3, 2).sum(axis=(0, 2)))
    x32 = Tensor(data=np.ones((2, 2), np.float32), dtype=np.float32)
    assert autograd.tile(x32, 2).dtype == np.float32


def test_tile_adding_axes_is_one_operator_whose_gradient_has_the_input_shape():
    x = np.array([0.0, 1.0, 2.0], np.float32)
    y = autograd.tile(Tensor(data=x), (2, 1, 2))  # numpy's rule: x is viewed as (1, 1, 3)
    assert y.shape == (2, 1, 6)
    dx = y.creator.backward(np.ones(y.shape, np.float32))  # the op SINGA users call directly
    np.testing.assert_array_equal(dx, np.full(3, 4.0, np.float32))


@pytest.mark.parametrize("repeats", [0, (2, 0), (), (1.5,), "2"])
def test_tile_errors(repeats):
    with pytest.raises(ValueError, match="tile: repeats must be"):
        autograd.tile(const(np.ones((2, 3))), repeats)


# ----- expand -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "shape,to,expect",
    [
        ((3, 1), (3, 4), (3, 4)),
        ((3, 1), (2, 1, 4), (2, 3, 4)),
        ((4,), (2, 3, 1), (2, 3, 4)),
        ((1, 1), (1,), (1, 1)),
    ],
)
def test_expand(shape, to, expect):
    x = randn(*shape)
    y = autograd.expand(const(x), to)
    assert y.shape == expect
    np.testing.assert_array_equal(y.to_numpy(), x * np.ones(to))
    y.data[...] = 0  # a real array, not a read-only view
    gradcheck(lambda x: autograd.expand(x, to), [x])


def test_expand_error():
    with pytest.raises(ValueError, match=r"expand.*\(3, 2\)"):
        autograd.expand(const(np.ones((3, 2))), (4, 2))


# ----- GPU (cupy) path: the same operators compared with the CPU (skipped without a GPU) -----
@pytest.mark.gpu
@pytest.mark.parametrize(
    "fn",
    [
        lambda x: autograd.flatten(autograd.transpose(x, (2, 0, 1)), 2),
        lambda x: autograd.cat(autograd.split(x, 1, [1, 3])[::-1], 1),
        lambda x: autograd.slice(x, [-1, 1], [-100, 5], [0, 2], [-2, 2]),
        lambda x: autograd.unsqueeze(autograd.squeeze(autograd.reshape(x, (1, 3, 4, 5)), 0), -1),
        lambda x: autograd.pad(x, "reflect", [1, 2, 0, 0, 1, 3]),
        lambda x: autograd.pad(x, "reflect", [4, 0, 7, 5, 2, 9]),  # repeated mirroring: scatter-add
        lambda x: autograd.pad(x, "edge", [0, -1, 2, 1, 1, 0]),
        lambda x: autograd.pad(x, "constant", [1, 0, 1, 0, 2, 0], 3.0),
        lambda x: autograd.expand(autograd.reduce_sum(x, [1]), (2, 3, 4, 5)),
        lambda x: autograd.tile(x, (1, 2, 1)),
    ],
)
def test_gpu_matches_cpu(fn):
    assert_gpu_matches_cpu(fn, [randn(3, 4, 5).astype(np.float32)])
