"""The autograd engine: recording, dependency counting, stores_grad, release."""

import gc

import numpy as np
import pytest

from singa import autograd, tensor
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor


def param(a):
    return Tensor(data=np.asarray(a, np.float64), dtype=np.float64, requires_grad=True, stores_grad=True)


def test_shared_parameter_gets_summed_gradient_once():
    w = param([[1.0, 2.0], [3.0, 4.0]])
    x = Tensor(data=np.ones((1, 2)), dtype=np.float64, requires_grad=False)
    y = autograd.add(autograd.matmul(x, w), autograd.matmul(x, w))
    pairs = list(autograd.backward(autograd.mul(y, y), dy=np.ones((1, 2))))
    assert [p for p, _ in pairs] == [w]
    # y = 2 x w, d(sum y^2)/dw = 2 y * 2 x^T
    expect = 4 * x.to_numpy().T @ (2 * x.to_numpy() @ w.to_numpy())
    np.testing.assert_allclose(pairs[0][1].to_numpy(), expect)


def test_diamond_graph_and_gradcheck():
    def f(a, b):
        c = autograd.mul(a, b)
        return autograd.add(autograd.mul(c, a), autograd.div(c, b))

    rng = np.random.default_rng(1)
    gradcheck(f, [rng.standard_normal((3, 4)), rng.uniform(1, 2, (4,))])


def test_intermediate_with_stores_grad_is_yielded():
    a = param([1.0, 2.0])
    h = autograd.mul(a, a)
    h.stores_grad = True
    out = autograd.mul(h, Tensor(data=[3.0, 3.0], dtype=np.float64, requires_grad=False))
    grads = autograd.gradients(out, dy=np.ones(2))
    np.testing.assert_allclose(grads[h].to_numpy(), [3.0, 3.0])
    np.testing.assert_allclose(grads[a].to_numpy(), [6.0, 12.0])


def test_requires_grad_false_stops_the_walk():
    a = param([1.0, 2.0])
    frozen = Tensor(data=[1.0, 1.0], dtype=np.float64, requires_grad=False)
    y = autograd.mul(autograd.add(frozen, frozen), a)
    grads = autograd.gradients(y, dy=np.ones(2))
    assert set(grads) == {id(a)}  # keyed by id(tensor) as in SINGA


def test_src_keeps_leaves_but_no_intermediate_value():
    """The recorded graph (which sonnx.to_onnx(inputs, [y]) walks) holds every leaf input
    (parameters, data, constants), and reaches intermediate values through creators only."""
    w = param(np.ones((3, 2)))
    x = Tensor(data=np.ones((4, 3)), dtype=np.float64, requires_grad=False)
    labels = Tensor(data=np.zeros(4, np.int64), dtype=np.int64, requires_grad=False)
    h = autograd.matmul(x, w)
    loss = autograd.softmax_cross_entropy(autograd.relu(h), labels)
    assert h.creator.src == [(None, 0, x), (None, 0, w)]
    relu = loss.creator.src[0][0]
    assert loss.creator.src[1] == (None, 0, labels)
    assert relu.src == [(h.creator, 0, None)]  # h itself is not kept
    (g,) = autograd.gradients(loss).values()  # keeps the graph, as SINGA's backward does
    assert g.shape == (3, 2) and h.creator.src is not None and loss.creator.src is not None
    (g,) = autograd.gradients(loss, retain_graph=False).values()
    assert g.shape == (3, 2) and h.creator.src is None and loss.creator.src is None


def test_parameter_frozen_after_creation_gets_no_gradient():
    class Mul(autograd.Operation):  # computes both gradients, needed or not
        def forward(self, a, b):
            self.cache = (a, b)
            return a * b

        def backward(self, dy):
            a, b = self.cache
            return dy * b, dy * a

    w, v = param([1.0, 2.0]), param([3.0, 4.0])
    w.requires_grad = False  # stores_grad stays True
    y = Mul()(w, v)[0]
    grads = autograd.gradients(y, dy=np.ones(2))
    assert set(grads) == {id(v)}
    np.testing.assert_array_equal(grads[v].to_numpy(), [1.0, 2.0])


def test_graph_recorded_without_caches_when_not_training_and_nothing_under_no_grad():
    """As SINGA's operators, ours record creator and src whatever autograd.training
    says; training only decides whether backward caches are kept."""
    a = param([1.0])
    autograd.training = False
    y = autograd.mul(a, a)
    assert y.creator is not None and y.creator.src == [(None, 0, a), (None, 0, a)]
    assert y.creator.cache is None and not y.creator.requires_grad and y.requires_grad
    autograd.training = True
    with autograd.no_grad():
        assert autograd.mul(a, a).creator is None
    assert autograd.training is True
    y = autograd.mul(a, a)
    assert y.creator is not None and y.creator.cache is not None


def test_non_scalar_needs_dy():
    a = param([1.0, 2.0])
    with pytest.raises(ValueError, match="dy"):
        list(autograd.backward(autograd.mul(a, a)))


def test_graph_is_released_and_memory_does_not_grow():
    w = param(np.ones((8, 8)))
    x = Tensor(data=np.ones((4, 8)), dtype=np.float64, requires_grad=False)
    y = autograd.matmul(x, w)
    list(autograd.backward(y, dy=np.ones((4, 8)), retain_graph=False))
    assert y.creator.src is None and y.creator.cache is None
    with pytest.raises(RuntimeError, match="released"):
        list(autograd.backward(y, dy=np.ones((4, 8))))
    gc.collect()
    before = len(gc.get_objects())
    for _ in range(1000):
        loss = autograd.softmax_cross_entropy(
            autograd.matmul(x, w), Tensor(data=np.zeros(4), requires_grad=False)
        )
        for _p, _g in autograd.backward(loss):
            pass
    gc.collect()
    assert len(gc.get_objects()) - before < 50


def test_stores_grad_implies_requires_grad():
    with pytest.raises(ValueError, match="stores_grad"):
        Tensor((2,), requires_grad=False, stores_grad=True)


def test_tensor_is_hashable_by_identity():
    a, b = tensor.zeros((2,)), tensor.zeros((2,))
    d = {a: 1, b: 2}
    assert d[a] == 1 and d[b] == 2 and len({a, b, a}) == 2


def test_backward_without_a_recorded_graph_says_why():
    a = param([1.0])
    autograd.training = False
    y = autograd.mul(a, a)
    autograd.training = True
    with pytest.raises(RuntimeError, match="autograd.training"):
        list(autograd.backward(y))
    with autograd.no_grad():
        y = autograd.mul(a, a)
    with pytest.raises(RuntimeError, match="autograd.training"):
        list(autograd.backward(y))


def test_from_numpy_and_tensor_default_require_but_do_not_store_gradients():
    x = tensor.from_numpy(np.ones((2, 3), np.float32))
    t = Tensor((2, 3))
    assert (x.requires_grad, x.stores_grad) == (True, False) == (t.requires_grad, t.stores_grad)
    y = autograd.relu(x)
    assert y.creator is not None and y.requires_grad


class _CountingMatMul(autograd.Operation):
    """A matmul that counts which input gradients its backward computes."""

    computed: list = []

    def forward(self, a, b):
        if self.requires_grad:
            self.cache = (a, b)
        return a @ b

    def backward(self, dy):
        a, b = self.cache
        _CountingMatMul.computed.append(self.needs_grad)
        da = dy @ b.T if self.needs_grad[0] else None
        db = a.T @ dy if self.needs_grad[1] else None
        return da, db


def test_walker_computes_no_gradient_for_inputs_that_store_none():
    """An input batch requires a gradient (SINGA's default) but stores none: the walker
    neither computes nor yields its gradient, also through operators run on it first."""
    w = param(np.ones((3, 2)))
    x = tensor.from_numpy(np.ones((4, 3)))
    x2 = autograd.mul(x, x)  # an operator on the input before it meets a parameter
    y = _CountingMatMul()(x2, w)[0]
    assert y.creator.needs_grad == (True, True)  # both cached, as SINGA keeps them
    _CountingMatMul.computed.clear()
    grads = autograd.gradients(autograd.sum(y))
    assert list(grads) == [id(w)]
    assert _CountingMatMul.computed == [(False, True)]


def test_direct_backward_on_a_creator_gives_every_input_gradient():
    """SINGA's tests call y.creator.backward(dy) directly on operators run on
    from_numpy inputs: the caches and all input gradients are there."""
    a = tensor.from_numpy(np.array([1.0, 2.0]))
    b = tensor.from_numpy(np.array([3.0, 5.0]))
    y = autograd.mul(a, b)
    da, db = y.creator.backward(np.ones(2))
    np.testing.assert_array_equal(da, [3.0, 5.0])
    np.testing.assert_array_equal(db, [1.0, 2.0])


class _TwiceFirstInput(autograd.Operation):
    """y = 2 x; its second input is only read (like indices): backward returns dx alone."""

    def forward(self, x, other):
        return 2 * x + 0 * other

    def backward(self, dy):
        return 2 * dy


def test_backward_may_leave_off_trailing_inputs_that_get_no_gradient():
    """As SINGA's operators return only the gradients of their differentiable inputs:
    the walker treats the missing ones as None, so an operator feeding only that input
    still completes and the parameter below it is yielded once, with the right sum."""
    w = param([1.0, 2.0])
    z = autograd.mul(w, w)  # reaches the short backward only through its trailing input
    y = _TwiceFirstInput()(w, z)[0]
    pairs = list(autograd.backward(y, dy=np.ones(2)))
    assert [p for p, _ in pairs] == [w]
    np.testing.assert_array_equal(pairs[0][1].to_numpy(), [2.0, 2.0])


def test_gradients_keyed_by_id_and_indexable_by_tensor():
    w = param([1.0, 2.0])
    g = autograd.gradients(autograd.sum(autograd.mul(w, w)))
    assert list(g.keys()) == [id(w)]
    np.testing.assert_array_equal(g[id(w)].to_numpy(), [2.0, 4.0])
    assert g[w] is g[id(w)] and w in g and g.get(w) is g[w]


def test_output_that_stores_its_gradient_is_yielded():
    w = param([1.0, 2.0])
    y = autograd.sum(autograd.mul(w, w))
    y.stores_grad = True
    g = autograd.gradients(y)
    assert set(g) == {id(y), id(w)}
    np.testing.assert_array_equal(g[y].to_numpy(), 1.0)


def test_eval_forward_keeps_no_caches():
    w = param(np.ones((3, 2)))
    x = tensor.from_numpy(np.ones((4, 3)))
    autograd.training = False
    h = autograd.relu(autograd.matmul(x, w))
    ops = [h.creator, h.creator.src[0][0]]
    assert all(op.cache is None and not op.requires_grad for op in ops)


def test_dtype_errors_name_the_operator_and_dtypes():
    f32 = Tensor(data=np.ones((2, 2)), dtype=np.float32)
    i64 = Tensor(data=np.ones((2, 2)), dtype=np.int64)
    with pytest.raises(ValueError, match="matmul.*float32 and int64"):
        autograd.matmul(f32, i64)
    with pytest.raises(ValueError, match="add_bias.*float32 and float64"):
        autograd.add_bias(f32, Tensor(data=np.ones(2), dtype=np.float64))
    x = Tensor(data=np.ones((1, 1, 3, 3)), dtype=np.int32)
    with pytest.raises(ValueError, match="conv2d.*floating"):
        autograd.conv2d(x, Tensor(data=np.ones((1, 1, 2, 2)), dtype=np.int32))


def _two_layer_loss(w1, w2, x, labels):
    h = autograd.relu(autograd.matmul(x, w1))
    return autograd.softmax_cross_entropy(autograd.matmul(h, w2), labels)


def _two_layer_setup():
    rng = np.random.default_rng(3)
    w1 = param(rng.standard_normal((5, 4)))
    w2 = param(rng.standard_normal((4, 3)))
    x = Tensor(data=rng.standard_normal((6, 5)), dtype=np.float64, requires_grad=False)
    labels = Tensor(data=np.arange(6) % 3, dtype=np.int64, requires_grad=False)
    return w1, w2, x, labels


def test_backward_keeps_the_graph_so_a_second_walk_repeats_the_gradients():
    """As in SINGA, the graph lives as long as the loss does: backward can walk it again."""
    w1, w2, x, labels = _two_layer_setup()
    autograd.training = True
    loss = _two_layer_loss(w1, w2, x, labels)
    first = {id(p): g.to_numpy().copy() for p, g in autograd.backward(loss)}
    second = {id(p): g.to_numpy() for p, g in autograd.backward(loss)}
    assert first.keys() == second.keys() == {id(w1), id(w2)}
    for k in first:
        np.testing.assert_array_equal(first[k], second[k])


def test_optimizer_step_after_backward_on_the_same_loss_uses_the_same_gradients():
    """SINGA's GAN example: autograd.backward(loss), then opt(loss) on that same loss."""
    from singa import opt

    w1, w2, x, labels = _two_layer_setup()
    autograd.training = True
    loss = _two_layer_loss(w1, w2, x, labels)
    grads = {p: g.to_numpy().copy() for p, g in autograd.backward(loss)}
    before = {p: p.to_numpy().copy() for p in grads}
    opt.SGD(lr=0.5)(loss)  # walks the kept graph again, then releases it (a step's last use)
    for p, g in grads.items():
        np.testing.assert_allclose(p.to_numpy(), before[p] - 0.5 * g, rtol=1e-12)
    assert loss.creator.src is None
    with pytest.raises(RuntimeError, match="released.*optimizer step"):
        list(autograd.backward(loss))


def test_kept_graph_is_freed_with_its_loss():
    """Keeping the graph costs nothing once the loss and outputs are dropped."""
    w1, w2, x, labels = _two_layer_setup()
    autograd.training = True
    for _ in range(3):  # warm up caches of the allocator and the interpreter
        list(autograd.backward(_two_layer_loss(w1, w2, x, labels)))
    gc.collect()
    before = len(gc.get_objects())
    for _ in range(500):
        loss = _two_layer_loss(w1, w2, x, labels)
        list(autograd.backward(loss))
    del loss
    gc.collect()
    assert len(gc.get_objects()) - before < 50


@pytest.mark.parametrize(
    "gshape, shape",
    [
        ((6, 7, 5), (5,)),
        ((6, 7, 5), (7, 5)),
        ((4, 3), ()),
        ((0, 3), (3,)),
        ((6, 7, 5), (1, 5)),
        ((2, 3, 4, 5), (4, 5)),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_unbroadcast_sums_to_the_shape(gshape, shape, dtype):
    """unbroadcast equals numpy's sum over the broadcast axes (leading axes alone take a
    product with a vector of ones: float32 and float64)."""
    from singa.autograd.engine import unbroadcast

    g = np.random.default_rng(0).standard_normal(gshape).astype(dtype)
    lead = len(gshape) - len(shape)
    axes = tuple(range(lead)) + tuple(
        i + lead for i, n in enumerate(shape) if n == 1 and gshape[i + lead] != 1
    )
    want = g.astype(np.float64).sum(axis=axes, keepdims=True).reshape(shape)
    got = unbroadcast(g, shape)
    assert got.shape == shape and got.dtype == dtype
    tol = {np.float16: 1e-2, np.float32: 1e-5, np.float64: 1e-12}[dtype]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 10)
