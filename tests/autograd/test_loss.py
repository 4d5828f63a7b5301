"""Losses: gradients (finite differences, float64) with respect to the input, values
against hand-written numpy, the (1,) result shape, dtypes, target handling, errors."""

import numpy as np
import pytest

from singa import autograd, tensor
from singa.autograd import loss as L
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor


def T(a, requires_grad=True, dtype=None):
    a = np.asarray(a, dtype=dtype)
    return Tensor(data=a, dtype=a.dtype, requires_grad=requires_grad, stores_grad=requires_grad)


def C(a, dtype=None):
    return T(a, requires_grad=False, dtype=dtype)


rng = np.random.default_rng(0)


def _log_softmax(x):
    s = x - x.max(axis=-1, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=-1, keepdims=True))


def _pick(a, idx):
    """a[..., idx[...]] along the last axis."""
    return np.take_along_axis(a, idx[..., None].astype(np.int64), axis=-1)[..., 0]


def _soft_labels(shape, seed):
    t = np.random.default_rng(seed).uniform(0.1, 1, shape)
    return t / t.sum(axis=-1, keepdims=True)


def _probs(shape, seed):
    return np.exp(_log_softmax(np.random.default_rng(seed).standard_normal(shape)))


# (x shape) cases: a batch of rows, several leading dimensions, a single row
CLASS_SHAPES = [(5, 4), (2, 3, 4), (4,)]


@pytest.mark.parametrize("shape", CLASS_SHAPES)
def test_softmax_cross_entropy_indices(shape):
    x = np.random.default_rng(1).standard_normal(shape) * 2
    t = np.random.default_rng(2).integers(0, shape[-1], shape[:-1])
    gradcheck(autograd.softmax_cross_entropy, [x, t], wrt=[0])
    n = x.size // shape[-1]
    want = -_pick(_log_softmax(x), t).sum() / n
    got = autograd.softmax_cross_entropy(C(x), C(t))
    assert got.shape == (1,)
    np.testing.assert_allclose(tensor.to_numpy(got)[0], want, rtol=1e-14)
    # float labels holding class indices give the same value
    got_f = autograd.softmax_cross_entropy(C(x), C(t, np.float32)).to_numpy()[0]
    np.testing.assert_allclose(got_f, want, rtol=1e-14)


def test_softmax_cross_entropy_targets_whose_rows_do_not_sum_to_one():
    """Scores as targets (SINGA's RNN tests use uniform random ones): the gradient is
    p * sum(t) - t per row, not p - t."""
    x = np.random.default_rng(5).standard_normal((3, 4))
    t = np.random.default_rng(6).uniform(0, 1, (3, 4))
    gradcheck(autograd.softmax_cross_entropy, [x, t], wrt=[0])
    want = -(t * _log_softmax(x)).sum() / 3
    np.testing.assert_allclose(autograd.softmax_cross_entropy(C(x), C(t)).to_numpy()[0], want, rtol=1e-14)


@pytest.mark.parametrize("shape", CLASS_SHAPES)
def test_softmax_cross_entropy_soft_labels(shape):
    x = np.random.default_rng(3).standard_normal(shape) * 2
    t = _soft_labels(shape, 4)
    gradcheck(autograd.softmax_cross_entropy, [x, t], wrt=[0])
    n = x.size // shape[-1]
    want = -(t * _log_softmax(x)).sum() / n
    np.testing.assert_allclose(autograd.softmax_cross_entropy(C(x), C(t)).to_numpy()[0], want, rtol=1e-14)


def test_softmax_cross_entropy_one_hot_equals_indices_and_is_stable():
    x = np.array([[1000.0, 0.0, -1000.0], [3.0, 2.0, 1.0]], np.float32)
    idx = np.array([1, 0])
    one_hot = np.eye(3, dtype=np.int64)[idx]
    a = autograd.softmax_cross_entropy(C(x), C(idx)).to_numpy()
    b = autograd.softmax_cross_entropy(C(x), C(one_hot)).to_numpy()
    assert a.dtype == np.float32 and np.isfinite(a).all()
    np.testing.assert_allclose(a, b, rtol=1e-6)
    np.testing.assert_allclose(a[0], (1000.0 + (-_log_softmax(x[1].astype(np.float64))[0])) / 2, rtol=1e-6)


@pytest.mark.parametrize("shape", CLASS_SHAPES)
def test_cross_entropy(shape):
    y = _probs(shape, 5)
    n = y.size // shape[-1]
    t = _soft_labels(shape, 6)
    gradcheck(autograd.cross_entropy, [y, t], wrt=[0])
    np.testing.assert_allclose(
        autograd.cross_entropy(C(y), C(t)).to_numpy()[0], -(t * np.log(y)).sum() / n, rtol=1e-14
    )
    idx = np.random.default_rng(7).integers(0, shape[-1], shape[:-1])
    gradcheck(autograd.cross_entropy, [y, idx], wrt=[0])
    np.testing.assert_allclose(
        autograd.cross_entropy(C(y), C(idx)).to_numpy()[0], -np.log(_pick(y, idx)).sum() / n, rtol=1e-14
    )


def test_cross_entropy_with_zero_probabilities_stays_finite():
    y = T(np.array([[0.0, 1.0], [0.5, 0.5]]))
    t = C(np.array([[0.0, 1.0], [1.0, 0.0]]))
    loss = autograd.cross_entropy(y, t)
    np.testing.assert_allclose(loss.to_numpy(), [np.log(2.0) / 2])  # 0 * log 0 counts as 0
    g = autograd.gradients(loss)[y].to_numpy()
    np.testing.assert_allclose(g, [[0.0, -0.5], [-1.0, 0.0]])
    # a zero probability on the target class: log clamped at -100, no gradient through the clamp
    y = T(np.array([[0.0, 1.0]]))
    loss = autograd.cross_entropy(y, C(np.array([0])))
    np.testing.assert_allclose(loss.to_numpy(), [100.0])
    np.testing.assert_array_equal(autograd.gradients(loss)[y].to_numpy(), [[0.0, 0.0]])
    y = T(np.array([[0.0, 1.0]]))
    loss = autograd.cross_entropy(y, C(np.array([[1.0, 0.0]])))
    np.testing.assert_allclose(loss.to_numpy(), [100.0])
    np.testing.assert_array_equal(autograd.gradients(loss)[y].to_numpy(), [[0.0, 0.0]])


@pytest.mark.parametrize("shape", [(5, 3), (2, 3, 4), (7,), ()])
def test_mse_loss(shape):
    x = np.random.default_rng(8).standard_normal(shape)
    t = np.random.default_rng(9).standard_normal(shape)
    gradcheck(autograd.mse_loss, [x, t], wrt=[0])
    got = autograd.mse_loss(C(x), C(t))
    assert got.shape == (1,)
    np.testing.assert_allclose(got.to_numpy()[0], np.mean((x - t) ** 2), rtol=1e-14)


@pytest.mark.parametrize("tshape", [(5, 1), (3,), (1, 1)])
def test_mse_loss_broadcasts_the_target_to_x(tshape):
    x = np.random.default_rng(8).standard_normal((5, 3))
    t = np.random.default_rng(9).standard_normal(tshape)
    gradcheck(autograd.mse_loss, [x, t], wrt=[0])
    got = autograd.mse_loss(C(x), C(t))
    np.testing.assert_allclose(got.to_numpy()[0], np.mean((x - t) ** 2), rtol=1e-14)
    with pytest.raises(ValueError, match="does not broadcast"):
        autograd.mse_loss(C(np.zeros(tshape)), C(x))  # x never broadcasts to the target


@pytest.mark.parametrize("shape", [(5, 3), (2, 3, 4), (7,)])
def test_binary_cross_entropy(shape):
    x = np.random.default_rng(10).uniform(0.05, 0.95, shape)
    t = np.random.default_rng(11).uniform(0, 1, shape)
    gradcheck(autograd.binary_cross_entropy, [x, t], wrt=[0])
    want = -np.mean(t * np.log(x) + (1 - t) * np.log(1 - x))
    got = autograd.binary_cross_entropy(C(x), C(t)).to_numpy()
    np.testing.assert_allclose(got[0], want, rtol=1e-14)


def test_binary_cross_entropy_clamps_like_pytorch():
    x = T(np.array([0.0, 1.0, 0.0, 1.0, 0.5, 1e-13]))
    t = C(np.array([1.0, 0.0, 0.0, 1.0, 1.0, 1.0]))
    loss = autograd.binary_cross_entropy(x, t)
    # log 0 is clamped at -100: two terms of 100, two of 0, then log 2 and -log 1e-13
    np.testing.assert_allclose(loss.to_numpy(), [(200.0 + np.log(2.0) - np.log(1e-13)) / 6])
    g = autograd.gradients(loss)[x].to_numpy()
    # PyTorch: (x - t) / max(x (1 - x), 1e-12) / N
    np.testing.assert_allclose(g, np.array([-1e12, 1e12, 0.0, 0.0, -2.0, (1e-13 - 1) / 1e-12]) / 6)
    with pytest.raises(ValueError, match=r"binary_cross_entropy: x must hold probabilities"):
        autograd.binary_cross_entropy(C(np.array([1.5])), C(np.array([1.0])))


@pytest.mark.parametrize("shape", CLASS_SHAPES)
def test_nll_loss(shape):
    x = _log_softmax(np.random.default_rng(12).standard_normal(shape))
    t = np.random.default_rng(13).integers(0, shape[-1], shape[:-1])
    gradcheck(autograd.nll_loss, [x, t], wrt=[0])
    n = x.size // shape[-1]
    np.testing.assert_allclose(
        autograd.nll_loss(C(x), C(t)).to_numpy()[0], -_pick(x, t).sum() / n, rtol=1e-14
    )


def test_nll_of_log_softmax_equals_softmax_cross_entropy():
    x = np.random.default_rng(14).standard_normal((6, 5))
    t = np.random.default_rng(15).integers(0, 5, 6)
    a = autograd.nll_loss(autograd.log_softmax(C(x), axis=-1), C(t)).to_numpy()
    b = autograd.softmax_cross_entropy(C(x), C(t)).to_numpy()
    np.testing.assert_allclose(a, b, rtol=1e-14)


def _case(name):
    """A float32 input and a matching target for each loss."""
    x = rng.standard_normal((4, 3)).astype(np.float32)
    if name in ("cross_entropy",):
        x = _probs((4, 3), 16).astype(np.float32)
    if name == "binary_cross_entropy":
        return rng.uniform(0.1, 0.9, (4, 3)).astype(np.float32), rng.uniform(0, 1, (4, 3)).astype(np.float32)
    if name == "mse_loss":
        return x, rng.standard_normal((4, 3))  # a float64 target is cast to x's dtype
    return x, np.array([0, 2, 1, 2], np.int32)


LOSSES = ["softmax_cross_entropy", "cross_entropy", "mse_loss", "binary_cross_entropy", "nll_loss"]


@pytest.mark.parametrize("name", LOSSES)
def test_float32_shape_1_and_no_gradient_for_target(name):
    fn = getattr(autograd, name)
    x, t = _case(name)
    tx = T(x)
    tt = T(t) if t.dtype.kind == "f" else C(t)
    loss = fn(tx, tt)
    assert loss.shape == (1,) and loss.dtype == np.float32
    assert isinstance(tensor.to_numpy(loss)[0], np.float32)
    grads = autograd.gradients(loss)
    assert grads[tx].dtype == np.float32 and grads[tx].shape == x.shape
    assert tt not in grads
    loss = fn(tx, tt)
    dx = loss.creator.backward(np.ones(1, np.float32))  # x's gradient alone, as in SINGA
    np.testing.assert_array_equal(dx, grads[tx].to_numpy())
    loss = fn(tx, tt)
    np.testing.assert_array_equal(loss.creator.backward(), dx)  # dy defaults to 1
    frozen = fn(C(x), C(t)).creator  # recorded (as in SINGA) but keeps no cache
    assert not frozen.requires_grad and frozen.cache is None


@pytest.mark.parametrize("name", LOSSES)
def test_shape_mismatch_names_op_and_shapes(name):
    fn = getattr(autograd, name)
    with pytest.raises(ValueError, match=rf"{name}: x of shape \(4, 3\) and target of shape \(5,\)"):
        fn(C(np.full((4, 3), 0.5)), C(np.zeros(5)))
    with pytest.raises(ValueError, match=rf"{name}: x must be a floating-point tensor"):
        fn(C(np.ones((4, 3), np.int64)), C(np.zeros((4, 3))))
    with pytest.raises(ValueError, match=rf"{name}: target must be numeric"):
        fn(C(np.full((4, 3), 0.5)), Tensor(data=np.array(["a"] * 4), dtype=object, requires_grad=False))


@pytest.mark.parametrize("name", ["softmax_cross_entropy", "cross_entropy", "nll_loss"])
def test_index_target_with_a_trailing_1_is_class_indices(name):
    """SINGA reads a target with one element per row as class indices (char-rnn's (N, 1))."""
    fn = getattr(autograd, name)
    x = _probs((6, 4), 3) if name == "cross_entropy" else np.random.default_rng(3).standard_normal((6, 4))
    if name == "nll_loss":
        x = _log_softmax(x)
    t = np.random.default_rng(4).integers(0, 4, 6)
    flat = fn(T(x), C(t))
    column = fn(T(x), C(t.reshape(6, 1)))
    np.testing.assert_array_equal(column.to_numpy(), flat.to_numpy())
    g_flat = autograd.gradients(flat)
    g_col = autograd.gradients(column)
    np.testing.assert_array_equal(
        next(iter(g_col.values())).to_numpy(), next(iter(g_flat.values())).to_numpy()
    )
    gradcheck(fn, [x, t.reshape(6, 1)], wrt=[0])


def test_one_class_column_target_stays_a_label():
    """With a single class, a target of x's shape (N, 1) is labels, not indices."""
    x = np.random.default_rng(5).standard_normal((3, 1))
    got = autograd.softmax_cross_entropy(C(x), C(np.full((3, 1), 0.5)))
    np.testing.assert_allclose(got.to_numpy()[0], 0.0, atol=1e-15)  # log_softmax of one class is 0
    assert L.is_index_target((3, 4), (3, 1)) and not L.is_index_target((3, 1), (3, 1))
    assert L.is_index_target((2, 3, 4), (2, 3)) and not L.is_index_target((2, 3, 4), (2, 1))


@pytest.mark.parametrize("name", ["softmax_cross_entropy", "cross_entropy", "nll_loss"])
def test_bad_class_indices(name):
    fn = getattr(autograd, name)
    x = C(np.full((3, 4), 0.25))
    with pytest.raises(
        ValueError, match=rf"{name}: class indices must lie in \[0, 4\), got values in \[0, 4\]"
    ):
        fn(x, C(np.array([0, 4, 1])))
    with pytest.raises(ValueError, match="lie in"):
        fn(x, C(np.array([0, -1, 1])))
    with pytest.raises(ValueError, match=rf"{name}: float class indices must be whole numbers"):
        fn(x, C(np.array([0.0, 1.5, 1.0])))


def test_bce_needs_identical_shapes_and_mse_a_target_that_broadcasts_to_x():
    with pytest.raises(ValueError, match=r"must have the same shape"):
        autograd.binary_cross_entropy(C(np.full((4, 3), 0.5)), C(np.full((3,), 0.5)))
    with pytest.raises(ValueError, match=r"does not broadcast to x's shape"):
        autograd.mse_loss(C(np.full((4, 3), 0.5)), C(np.full((4,), 0.5)))


def test_nll_loss_rejects_label_shaped_targets():
    with pytest.raises(ValueError, match=r"nll_loss: x of shape \(2, 3\) and target of shape \(2, 3\)"):
        autograd.nll_loss(C(np.zeros((2, 3))), C(np.zeros((2, 3))))


def test_backward_scales_with_dy_and_keeps_dy():
    x = np.random.default_rng(17).standard_normal((3, 4))
    t = np.array([0, 3, 1])
    for op in [L.SoftMaxCrossEntropy(), L.NLLLoss(), L.CrossEntropy()]:
        xin = _probs((3, 4), 18) if isinstance(op, L.CrossEntropy) else x
        op(T(xin), C(t))
        g1 = op.backward(np.ones(1))[0]
        dy = np.array([2.5])
        g2 = op.backward(dy)[0]
        np.testing.assert_allclose(g2, 2.5 * g1)
        np.testing.assert_array_equal(dy, [2.5])


# ----- ranking_loss --------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(6,), (4, 3)])
def test_ranking_loss_value_and_gradient(shape):
    rng = np.random.default_rng(7)
    pos, neg = rng.standard_normal(shape), rng.standard_normal(shape)
    pos[np.abs(neg - pos + 0.2) < 0.05] += 0.2  # keep the hinge away from its kink
    y = autograd.ranking_loss(T(pos), T(neg))
    assert y.shape == (1,)
    want = np.maximum(0, 0.2 - pos + neg).sum() / shape[0]
    np.testing.assert_allclose(y.to_numpy()[0], want, rtol=1e-14)
    gradcheck(lambda p, n: autograd.ranking_loss(p, n, 0.2), [pos, neg])
    gradcheck(lambda p, n: autograd.RankingLoss(0.5)(p, n)[0], [pos, neg])


def test_ranking_loss_shape_mismatch_raises():
    with pytest.raises(ValueError, match=r"^ranking_loss: .*same shape"):
        autograd.ranking_loss(T(np.ones((2, 3))), T(np.ones(3)))


def test_shape_errors_are_value_errors_and_assertion_errors_as_singa_asserts_them():
    from singa.autograd.errors import ShapeError

    x2, x3, b1 = C(np.zeros((4, 4))), C(np.zeros((4, 4, 4))), C(np.zeros(4))
    calls = [
        (autograd.softmax_cross_entropy, (x2, x3), "do not match"),
        (autograd.mse_loss, (x2, x3), "does not broadcast to x's shape"),
        (autograd.ranking_loss, (x2, b1), "must have the same shape"),
        (autograd.add_bias, (x2, b1, 3), "axis must be 0 or 1"),
        (autograd.add_bias, (x2, C(np.zeros(3)), 0), "do not match"),
    ]
    for fn, args, match in calls:
        with pytest.raises(ShapeError, match=match) as info:
            fn(*args)
        assert isinstance(info.value, ValueError) and isinstance(info.value, AssertionError)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_cross_entropy_compiled_rows_against_the_formula(dtype):
    """The CPU kernel (class indices): loss and gradient against the
    float64 formula, with scores far from zero (the row maximum is subtracted)."""
    x = (np.random.default_rng(7).standard_normal((6, 5)) * 30 + 1e3).astype(dtype)
    t = np.array([0, 4, 2, 2, 1, 3], dtype=np.int32)
    op = L.SoftMaxCrossEntropy()
    op.requires_grad = True
    loss = op.forward(x, t)
    x = x.astype(np.float64)
    want = -_pick(_log_softmax(x), t).mean()
    tol = 1e-5 if dtype == np.float32 else 1e-13
    assert loss.dtype == dtype and loss.shape == (1,)
    np.testing.assert_allclose(loss[0], want, rtol=tol)
    p = np.exp(_log_softmax(x))
    g = op.backward(np.asarray([2.0], dtype=dtype))
    onehot = np.eye(5)[t]
    assert g.dtype == dtype
    np.testing.assert_allclose(g, (p - onehot) * 2.0 / 6, rtol=tol, atol=tol * 1e-3)
    again = op.backward(np.asarray([2.0]))  # the cache is left as it was; float64 dy keeps the dtype
    assert again.dtype == dtype
    np.testing.assert_array_equal(again, g)


def test_softmax_cross_entropy_nan_scores_give_a_nan_loss():
    x = np.zeros((2, 3))
    x[1, 2] = np.nan
    got = autograd.softmax_cross_entropy(C(x), C(np.array([0, 1]))).to_numpy()[0]
    assert np.isnan(got)


def test_softmax_cross_entropy_bad_index_leaves_no_cache():
    op = L.SoftMaxCrossEntropy()
    op.requires_grad = True
    with pytest.raises(ValueError, match=r"got values in \[0, 3\]"):
        op.forward(np.zeros((2, 3)), np.array([0, 3]))
    assert op.cache is None


def test_softmax_cross_entropy_of_an_empty_batch_is_nan_with_an_empty_gradient():
    x = T(np.zeros((0, 4), np.float32))
    with pytest.warns(RuntimeWarning):
        loss = autograd.softmax_cross_entropy(x, C(np.zeros((0,), np.int32)))
    assert np.isnan(loss.to_numpy()[0])
    g = loss.creator.backward()
    assert g.shape == (0, 4) and g.dtype == np.float32
