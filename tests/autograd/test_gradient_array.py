"""A direct ``op.backward(...)`` call returns GradientArray views (SINGA's ``dx.shape()``
works); the walker, the recorder (graph replay) and the profiler get plain arrays."""

import numpy as np
import pytest

from singa import autograd, device, tensor
from singa.autograd.gradient_array import CallableShape, GradientArray, gradient_views
from singa.tensor import Tensor


def param(a):
    return Tensor(data=np.asarray(a, np.float64), dtype=np.float64, requires_grad=True, stores_grad=True)


def _all_operation_classes():
    seen, stack = [], [autograd.Operation]
    while stack:
        for sub in stack.pop().__subclasses__():
            seen.append(sub)
            stack.append(sub)
    return seen


def test_callable_shape_is_the_tuple_and_returns_it_when_called():
    s = CallableShape((2, 3))
    assert s == (2, 3) and s() == (2, 3) and type(s()) is tuple
    assert s[1] == 3 and len(s) == 2 and hash(s) == hash((2, 3))


def test_direct_backward_returns_a_view_with_a_callable_shape():
    x = tensor.from_numpy(np.array([[-1.0, 2.0, 3.0], [4.0, -5.0, 6.0]], np.float32))
    y = autograd.relu(x)
    dy = np.arange(6, dtype=np.float32).reshape(2, 3)
    dx = y.creator.backward(dy)
    assert type(dx) is GradientArray
    assert dx.shape() == dx.shape == (2, 3) and dx.dtype == np.float32
    np.testing.assert_array_equal(dx, dy * (x.to_numpy() > 0))
    plain = y.creator._backward_arrays(dy)
    assert type(plain) is np.ndarray
    np.testing.assert_array_equal(dx, plain)


def test_view_shares_memory_and_numpy_and_tensor_functions_accept_it():
    a = np.arange(6.0).reshape(2, 3)
    v = gradient_views(a)
    assert np.shares_memory(v, a) and v.dtype == a.dtype
    assert np.sum(v) == 15.0 and np.allclose(v.T, a.T) and v.reshape(3, 2).shape() == (3, 2)
    t = tensor.from_raw_tensor(v)
    assert type(t.data) is np.ndarray and np.shares_memory(t.data, a)  # Tensor.data stays plain
    assert type(tensor.to_numpy(t)) is np.ndarray
    assert type(tensor.from_numpy(v).data) is np.ndarray
    assert type(Tensor(data=v, dtype=v.dtype).data) is np.ndarray


def test_gradient_views_keeps_none_tuples_lists_and_scalars():
    a, b = np.ones(2), np.zeros((1, 2))
    out = gradient_views((a, None, b))
    assert type(out) is tuple and out[1] is None
    assert [type(g) for g in (out[0], out[2])] == [GradientArray, GradientArray]
    assert type(gradient_views([a])) is list
    assert gradient_views(None) is None
    s = gradient_views(np.float32(2.0))
    assert s.shape() == () and s.dtype == np.float32 and float(s) == 2.0


def test_several_gradients_are_each_viewed():
    a = tensor.from_numpy(np.array([1.0, 2.0]))
    b = tensor.from_numpy(np.array([3.0, 5.0]))
    da, db = autograd.mul(a, b).creator.backward(np.ones(2))
    assert da.shape() == db.shape() == (2,)
    np.testing.assert_array_equal(db, [1.0, 2.0])


class _Recorder:
    """Keeps what the engine reports as recorded calls (as graph tracing does)."""

    def __init__(self):
        self.calls = []

    def record(self, fn, ins, outs, op=None, tensors=None, is_backward=False):
        self.calls.append((fn, tuple(ins), tuple(outs), op, is_backward))


def test_walker_and_recorder_get_plain_arrays():
    """Graph replay calls exactly the recorded functions: they are the classes' own
    backwards (not the viewing wrappers), and every array they saw is plain."""
    w = param(np.ones((3, 2)))
    x = Tensor(data=np.ones((4, 3)), dtype=np.float64, requires_grad=False)
    dev = device.get_default_device()
    rec = _Recorder()
    dev.recorder = rec
    try:
        y = autograd.mean(autograd.relu(autograd.matmul(x, w)), autograd.tanh(autograd.matmul(x, w)))
        grads = list(autograd.backward(autograd.sum(y)))
    finally:
        dev.recorder = None
    assert type(grads[0][1].data) is np.ndarray
    backward_calls = [c for c in rec.calls if c[4]]
    assert len(backward_calls) >= 5
    for fn, ins, outs, op, _ in backward_calls:
        assert fn.__func__ is type(op)._backward_arrays
        assert not hasattr(fn.__func__, "_backward_arrays")  # not a viewing wrapper
        assert all(type(a) is np.ndarray for a in ins + outs if a is not None)


def test_profiler_times_the_plain_backward():
    dev = device.get_default_device()
    dev.SetVerbosity(2)
    try:
        w = param([1.0, 2.0])
        grads = list(autograd.backward(autograd.sum(autograd.mul(w, w))))
    finally:
        dev.SetVerbosity(0)
    assert type(grads[0][1].data) is np.ndarray


class _Scale(autograd.Operation):
    """y = k x, defined as a SINGA user would."""

    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, x):
        return self.k * x

    def backward(self, dy):
        _Scale.seen.append(type(dy))
        return self.k * dy


_Scale.seen = []


class _ScaleTwice(_Scale):
    """Calls its parent's backward through super(): gets a plain array back."""

    def backward(self, dy):
        dx = super().backward(dy)
        _ScaleTwice.inner = type(dx)
        return 2 * dx


class _ScaleAgain(_ScaleTwice):
    """Defines no backward: a direct call still views the inherited one's result."""


def test_user_subclass_direct_call_views_and_walker_gets_plain():
    w = param([1.0, -2.0])
    y = _Scale(3.0)(w)[0]
    assert y.creator.backward(np.ones(2)).shape() == (2,)
    _Scale.seen.clear()
    z = _Scale(2.0)(autograd.relu(y))[0]  # relu's backward receives what _Scale's walker call gave
    ((p, g),) = autograd.backward(autograd.sum(z))
    assert type(g.data) is np.ndarray and _Scale.seen == [np.ndarray, np.ndarray]
    np.testing.assert_array_equal(g.to_numpy(), [6.0, 0.0])


def test_super_backward_inside_a_subclass_returns_plain_arrays():
    w = param([1.0, 2.0])
    dx = _ScaleTwice(3.0)(w)[0].creator.backward(np.ones(2))
    assert type(dx) is GradientArray and _ScaleTwice.inner is np.ndarray
    np.testing.assert_array_equal(dx, [6.0, 6.0])
    dx2 = _ScaleAgain(1.0)(w)[0].creator.backward(np.ones(2))
    assert type(dx2) is GradientArray and _ScaleTwice.inner is np.ndarray


def test_every_operator_class_keeps_its_own_backward_for_the_engine():
    classes = _all_operation_classes()
    assert len(classes) > 80
    for cls in classes:
        raw = cls._backward_arrays
        assert not hasattr(raw, "_backward_arrays"), cls  # the class's function, not a wrapper
        own = cls.__dict__.get("backward")
        if own is not None:
            assert own._backward_arrays is raw, cls


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_values_and_dtype_match_the_walker(dtype):
    w = param(np.array([[0.5, -1.0], [2.0, 3.0]]))
    w.data = w.data.astype(dtype)
    y = autograd.tanh(w)
    direct = y.creator.backward(np.ones((2, 2), dtype))
    ((p, g),) = autograd.backward(autograd.sum(y))
    assert direct.dtype == g.dtype == dtype
    np.testing.assert_array_equal(np.asarray(direct), g.to_numpy())


def test_a_training_step_makes_no_viewing_call(monkeypatch):
    """The views cost the walker nothing: a conv/pool/linear training step (forward,
    backward, SGD update) never calls the viewing code; a direct call does, once."""
    from singa import opt
    from singa.autograd import engine

    calls = []
    real = engine.gradient_views
    monkeypatch.setattr(engine, "gradient_views", lambda r: calls.append(1) or real(r))
    rng = np.random.default_rng(0)
    x = Tensor(data=rng.standard_normal((2, 1, 6, 6)), dtype=np.float64, requires_grad=False)
    w = param(rng.standard_normal((3, 1, 3, 3)))
    fc = param(rng.standard_normal((12, 2)))
    t = Tensor(data=np.array([0, 1]), dtype=np.int64, requires_grad=False)
    h = autograd.max_pool_2d(autograd.relu(autograd.conv2d(x, w, padding=1)), 3)
    loss = autograd.softmax_cross_entropy(autograd.matmul(autograd.flatten(h), fc), t)
    before = w.to_numpy()
    opt.SGD(0.1)(loss)
    assert calls == [] and not np.array_equal(w.to_numpy(), before)
    y = autograd.relu(w)
    y.creator.backward(np.ones(w.shape))
    assert calls == [1]


def _f32(*shape, seed=0):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return tensor.from_numpy(a)  # requires a gradient, stores none: as SINGA's tests make them


@pytest.mark.parametrize(
    "make",
    [
        lambda: autograd.conv2d(_f32(2, 3, 5, 5), _f32(4, 3, 3, 3), _f32(4), padding=1),
        lambda: autograd.max_pool_2d(_f32(1, 2, 4, 4), 2),
        lambda: autograd.add_bias(_f32(3, 4), _f32(4)),
        lambda: autograd.split(_f32(4, 6), 1, [2, 4]),
        lambda: autograd.mse_loss(_f32(3, 2), _f32(3, 2, seed=1)),
        lambda: autograd.softmax_cross_entropy(
            _f32(3, 4), tensor.from_numpy(np.eye(4, dtype=np.float32)[:3])
        ),
    ],
    ids=["conv2d", "max_pool_2d", "add_bias", "split", "mse_loss", "softmax_cross_entropy"],
)
def test_singa_style_direct_calls_read_shape_as_a_method(make):
    """SINGA's test pattern: ``dxs = y.creator.backward(dy.data)``, then each ``dx.shape()``
    equals its input's shape (loss operators' ``backward()`` defaults dy to 1)."""
    ys = make()
    ys = ys if isinstance(ys, tuple) else (ys,)
    op = ys[0].creator
    dys = [np.ones(y.shape, np.float32) for y in ys]
    out = op.backward() if ys[0].size() == 1 else op.backward(*dys)
    grads = out if isinstance(out, tuple) else (out,)
    inputs = [s[2] for s in op.src][: len(grads)]
    assert grads and all(type(g) is GradientArray for g in grads if g is not None)
    for g, x in zip(grads, inputs):
        if g is not None and x is not None:
            assert g.shape() == tuple(x.shape) and g.dtype == np.float32
