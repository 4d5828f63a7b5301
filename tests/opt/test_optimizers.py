"""Optimizers against their closed-form updates (numpy, written here) and torch.optim."""

import math

import numpy as np
import pytest

from singa import autograd, opt
from singa.tensor import Tensor

SHAPES = [(3, 4), (5,)]
STEPS = 6


def make_params(dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(dtype) for s in SHAPES] for _ in range(STEPS)]
    params = [Tensor(data=a, dtype=dtype, requires_grad=True, stores_grad=True) for a in init]
    return init, grads, params


def run_singa(optimizer, dtype=np.float64, seed=0):
    init, grads, params = make_params(dtype, seed)
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            optimizer.update(p, Tensor(data=g, dtype=dtype, requires_grad=False))
        optimizer.step()
    return init, grads, [p.to_numpy() for p in params]


# ----- closed-form references (one parameter, list of gradients) -------------------------
def ref_sgd(p, gs, lr, momentum=0.0, dampening=0.0, wd=0.0, nesterov=False):
    p = p.copy()
    buf = None
    for g in gs:
        g = g + wd * p
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
        p = p - lr * g
    return p


def ref_adam(p, gs, lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0, amsgrad=False, decoupled=False):
    p = p.copy()
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    vmax = np.zeros_like(p)
    for t, g in enumerate(gs, start=1):
        if decoupled:
            p = p * (1 - lr * wd)
        else:
            g = g + wd * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        vmax = np.maximum(vmax, v)
        vv = vmax if amsgrad else v
        mhat = m / (1 - b1**t)
        p = p - lr * mhat / (np.sqrt(vv) / math.sqrt(1 - b2**t) + eps)
    return p


def ref_rmsprop(p, gs, lr, rho=0.9, eps=1e-8, wd=0.0, momentum=0.0, centered=False):
    p = p.copy()
    s = np.zeros_like(p)
    a = np.zeros_like(p)
    buf = np.zeros_like(p)
    for g in gs:
        g = g + wd * p
        s = rho * s + (1 - rho) * g * g
        if centered:
            a = rho * a + (1 - rho) * g
            avg = np.sqrt(s - a * a) + eps
        else:
            avg = np.sqrt(s) + eps
        if momentum:
            buf = momentum * buf + g / avg
            p = p - lr * buf
        else:
            p = p - lr * g / avg
    return p


def ref_adagrad(p, gs, lr, lr_decay=0.0, wd=0.0, init_acc=0.0, eps=1e-8):
    p = p.copy()
    s = np.full_like(p, init_acc)
    for t, g in enumerate(gs, start=1):
        g = g + wd * p
        clr = lr / (1 + (t - 1) * lr_decay)
        s = s + g * g
        p = p - clr * g / (np.sqrt(s) + eps)
    return p


CASES = [
    (lambda: opt.SGD(0.1), lambda p, gs: ref_sgd(p, gs, 0.1)),
    (lambda: opt.SGD(0.1, weight_decay=0.01), lambda p, gs: ref_sgd(p, gs, 0.1, wd=0.01)),
    (lambda: opt.SGD(0.05, momentum=0.9), lambda p, gs: ref_sgd(p, gs, 0.05, momentum=0.9)),
    (
        lambda: opt.SGD(0.05, momentum=0.9, dampening=0.3, weight_decay=0.1),
        lambda p, gs: ref_sgd(p, gs, 0.05, momentum=0.9, dampening=0.3, wd=0.1),
    ),
    (
        lambda: opt.SGD(0.05, momentum=0.8, nesterov=True, weight_decay=0.02),
        lambda p, gs: ref_sgd(p, gs, 0.05, momentum=0.8, wd=0.02, nesterov=True),
    ),
    (lambda: opt.Adam(0.01), lambda p, gs: ref_adam(p, gs, 0.01)),
    (
        lambda: opt.Adam(0.02, beta_1=0.8, beta_2=0.9, epsilon=1e-6, weight_decay=0.1),
        lambda p, gs: ref_adam(p, gs, 0.02, b1=0.8, b2=0.9, eps=1e-6, wd=0.1),
    ),
    (lambda: opt.Adam(0.01, amsgrad=True), lambda p, gs: ref_adam(p, gs, 0.01, amsgrad=True)),
    (lambda: opt.AdamW(0.01), lambda p, gs: ref_adam(p, gs, 0.01, wd=0.01, decoupled=True)),
    (
        lambda: opt.AdamW(0.01, weight_decay=0.5, amsgrad=True),
        lambda p, gs: ref_adam(p, gs, 0.01, wd=0.5, decoupled=True, amsgrad=True),
    ),
    (lambda: opt.RMSProp(0.01), lambda p, gs: ref_rmsprop(p, gs, 0.01)),
    (
        lambda: opt.RMSProp(0.01, rho=0.9, weight_decay=0.1, momentum=0.5, centered=True),
        lambda p, gs: ref_rmsprop(p, gs, 0.01, rho=0.9, wd=0.1, momentum=0.5, centered=True),
    ),
    (lambda: opt.RMSProp(0.02, momentum=0.9), lambda p, gs: ref_rmsprop(p, gs, 0.02, momentum=0.9)),
    (lambda: opt.AdaGrad(0.1), lambda p, gs: ref_adagrad(p, gs, 0.1)),
    (
        lambda: opt.AdaGrad(0.1, lr_decay=0.1, weight_decay=0.05, initial_accumulator_value=0.5),
        lambda p, gs: ref_adagrad(p, gs, 0.1, lr_decay=0.1, wd=0.05, init_acc=0.5),
    ),
]


@pytest.mark.parametrize("make, ref", CASES)
def test_matches_closed_form(make, ref):
    init, grads, final = run_singa(make())
    for i in range(len(SHAPES)):
        expect = ref(init[i], [g[i] for g in grads])
        np.testing.assert_allclose(final[i], expect, rtol=1e-12, atol=1e-12)
        assert not np.allclose(final[i], init[i])  # the update did something


@pytest.mark.parametrize("make, ref", CASES[::3])
def test_float32_updates_in_place_and_keep_dtype(make, ref):
    _, grads, params = make_params(np.float32)
    arrays = [p.data for p in params]
    o = make()
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            o.update(p, g)
    for p, a in zip(params, arrays):
        assert p.data is a and p.dtype == np.float32


def test_backward_and_update_and_call_are_the_same():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 3))
    w0 = rng.standard_normal((3, 2))
    results = []
    for use_call in (False, True):
        w = Tensor(data=w0, dtype=np.float64, requires_grad=True, stores_grad=True)
        xt = Tensor(data=x, dtype=np.float64, requires_grad=False)
        t = Tensor(data=np.array([0, 1, 1, 0]), requires_grad=False)
        o = opt.SGD(0.5, momentum=0.9)
        prev = autograd.training
        autograd.training = True
        try:
            for _ in range(3):
                loss = autograd.softmax_cross_entropy(autograd.matmul(xt, w), t)
                (o if use_call else o.backward_and_update)(loss)
        finally:
            autograd.training = prev
        assert o.steps == 3
        results.append(w.to_numpy())
    np.testing.assert_array_equal(results[0], results[1])
    assert not np.allclose(results[0], w0)


def test_update_rejects_wrong_gradient_shape():
    p = Tensor(data=np.zeros((2, 3)), requires_grad=True, stores_grad=True)
    with pytest.raises(ValueError, match="gradient of shape"):
        opt.SGD(0.1).update(p, np.zeros((3, 2), np.float32))


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: opt.SGD(-0.1), "lr"),
        (lambda: opt.SGD(float("nan")), "lr"),
        (lambda: opt.SGD("0.1"), "lr"),
        (lambda: opt.SGD(0.1, momentum=-1), "momentum"),
        (lambda: opt.SGD(0.1, weight_decay=-1e-4), "weight_decay"),
        (lambda: opt.SGD(0.1, nesterov=True), "nesterov"),
        (lambda: opt.SGD(0.1, momentum=0.9, dampening=0.1, nesterov=True), "nesterov"),
        (lambda: opt.SGD(0.1, clip_norm=0), "clip_norm"),
        (lambda: opt.Adam(0.1, beta_1=1.0), "beta_1"),
        (lambda: opt.Adam(0.1, beta_2=-0.1), "beta_2"),
        (lambda: opt.Adam(0.1, epsilon=-1.0), "epsilon"),
        (lambda: opt.Adam(0.1, amsgrad=1), "amsgrad"),
        (lambda: opt.AdamW(0.1, weight_decay=-0.01), "weight_decay"),
        (lambda: opt.RMSProp(0.1, rho=1.5), "rho"),
        (lambda: opt.RMSProp(0.1, centered="yes"), "centered"),
        (lambda: opt.AdaGrad(0.1, lr_decay=-1), "lr_decay"),
        (lambda: opt.AdaGrad(0.1, initial_accumulator_value=-1), "initial_accumulator_value"),
    ],
)
def test_hyperparameters_are_validated(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_positional_lr_and_lr_changes_between_steps():
    o = opt.SGD(0.05)
    assert o.get_lr() == 0.05
    p = Tensor(data=np.ones(3), dtype=np.float64, requires_grad=True, stores_grad=True)
    o.update(p, np.ones(3))
    o.lr = 0.5
    o.update(p, np.ones(3))
    np.testing.assert_allclose(p.to_numpy(), 1 - 0.05 - 0.5)


# ----- torch.optim ------------------------------------------------------------------------
TORCH_CASES = [
    (lambda: opt.SGD(0.05, momentum=0.9, dampening=0.1, weight_decay=0.01), "SGD",
     dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    (lambda: opt.SGD(0.05, momentum=0.9, nesterov=True), "SGD", dict(lr=0.05, momentum=0.9, nesterov=True)),
    (lambda: opt.Adam(0.01, weight_decay=0.1, amsgrad=True), "Adam",
     dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
    (lambda: opt.AdamW(0.01, weight_decay=0.2), "AdamW", dict(lr=0.01, weight_decay=0.2)),
    (lambda: opt.RMSProp(0.01, rho=0.9, momentum=0.5, centered=True, weight_decay=0.1), "RMSprop",
     dict(lr=0.01, alpha=0.9, momentum=0.5, centered=True, weight_decay=0.1)),
    (lambda: opt.AdaGrad(0.1, lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.2), "Adagrad",
     dict(lr=0.1, lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.2, eps=1e-8)),  # SINGA's eps
]  # fmt: skip


@pytest.mark.parametrize("make, tname, kwargs", TORCH_CASES)
def test_matches_torch_optim(make, tname, kwargs):
    torch = pytest.importorskip("torch")
    init, grads, final = run_singa(make())
    tparams = [torch.tensor(a.copy(), requires_grad=True) for a in init]
    topt = getattr(torch.optim, tname)(tparams, foreach=False, **kwargs)
    for step_grads in grads:
        for tp, g in zip(tparams, step_grads):
            tp.grad = torch.tensor(g)
        topt.step()
    for a, tp in zip(final, tparams):
        np.testing.assert_allclose(a, tp.detach().numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("make, ref", CASES)
def test_donated_gradient_gives_bitwise_the_same_update(make, ref):
    """Graph replays hand dead gradients over as scratch space (donate=True)."""
    finals = []
    for donate in (False, True):
        _, grads, params = make_params(np.float32)
        o = make()
        for step_grads in grads:
            for p, g in zip(params, step_grads):
                o._apply(p, p.data, g.copy(), donate)
            o.step()
        finals.append([p.to_numpy() for p in params] + [s for p in params for s in o._slots[p].values()])
    for a, b in zip(*finals):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "kw",
    [
        dict(momentum=0.9),
        dict(momentum=0.9, weight_decay=1e-4),
        dict(momentum=0.8, dampening=0.3, weight_decay=0.01),
        dict(momentum=0.9, nesterov=True, weight_decay=5e-4),
    ],
)
def test_sgd_momentum_step_equals_the_numpy_formulas_bitwise(dtype, kw):
    # the compiled one-pass step must round every operation as numpy does
    m, d, wd, nesterov = (
        kw["momentum"],
        kw.get("dampening", 0.0),
        kw.get("weight_decay", 0.0),
        kw.get("nesterov"),
    )
    rng = np.random.default_rng(0)
    p0 = rng.standard_normal((70, 80)).astype(dtype)  # large enough for the compiled step
    grads = [rng.standard_normal(p0.shape).astype(dtype) for _ in range(4)]
    param = Tensor(data=p0.copy(), dtype=dtype, requires_grad=True, stores_grad=True)
    sgd = opt.SGD(0.05, **kw)
    p, buf = p0.copy(), None
    for g in grads:
        sgd.update(param, Tensor(data=g, dtype=dtype))
        g = g + wd * p if wd else g
        buf = g.copy() if buf is None else buf * m + ((1 - d) * g if d else g)
        p -= 0.05 * (g + m * buf if nesterov else buf)
        assert param.data.dtype == dtype
        np.testing.assert_array_equal(param.data, p)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "cls, kw",
    [
        ("Adam", dict()),
        ("Adam", dict(weight_decay=0.01)),
        ("AdamW", dict(weight_decay=0.1)),
        ("Adam", dict(amsgrad=True, weight_decay=1e-3)),
        ("AdamW", dict(amsgrad=True)),
    ],
)
@pytest.mark.parametrize("shape", [(70, 80), (3, 5)])  # the compiled step, and numpy's formulas
def test_adam_step_equals_the_numpy_formulas_bitwise(dtype, cls, kw, shape):
    rng = np.random.default_rng(1)
    p0 = rng.standard_normal(shape).astype(dtype)
    grads = [rng.standard_normal(shape).astype(dtype) for _ in range(4)]
    param = Tensor(data=p0.copy(), dtype=dtype, requires_grad=True, stores_grad=True)
    lr, b1, b2, eps = 0.01, 0.9, 0.999, 1e-8
    adam = getattr(opt, cls)(lr, **kw)
    wd, amsgrad, decoupled = adam.weight_decay, kw.get("amsgrad", False), cls == "AdamW"
    p, m, v, vmax = p0.copy(), np.zeros_like(p0), np.zeros_like(p0), np.zeros_like(p0)
    for t, g in enumerate(grads, start=1):
        adam.update(param, Tensor(data=g, dtype=dtype))
        if decoupled and wd:
            p *= 1 - lr * wd
        elif wd:
            g = g + wd * p
        m = m * b1 + g * (1 - b1)
        v = v * b2 + (g * g) * (1 - b2)
        if amsgrad:
            vmax = np.maximum(vmax, v)
        denom = np.sqrt(vmax if amsgrad else v) / math.sqrt(1 - b2**t) + eps
        p -= (m / denom) * (lr / (1 - b1**t))
        assert param.data.dtype == dtype
        np.testing.assert_array_equal(param.data, p)
