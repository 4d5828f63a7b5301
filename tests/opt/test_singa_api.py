"""The optimizers' SINGA forms: signatures and positional order, dtype=, apply(name,
value, grad), get_states()/set_states() without names, lr_value, schedulers called
with a step tensor."""

import inspect

import numpy as np
import pytest

from singa import opt, tensor
from singa.tensor import Tensor


def w_and_g(value=0.1, grad=0.1, shape=(2, 3), dtype=np.float32):
    w = Tensor(shape, dtype=dtype).set_value(value)
    g = Tensor(shape, dtype=dtype).set_value(grad)
    return w, g


@pytest.mark.parametrize(
    "cls, leading",
    [
        (opt.SGD, ["lr", "momentum", "dampening", "weight_decay", "nesterov", "dtype"]),
        (opt.RMSProp, ["lr", "rho", "epsilon", "weight_decay"]),
        (opt.AdaGrad, ["lr", "epsilon", "weight_decay"]),
        (opt.Adam, ["lr", "beta_1", "beta_2", "epsilon", "weight_decay"]),
        (opt.Optimizer, ["lr", "dtype"]),
    ],
)
def test_positional_order_is_singas(cls, leading):
    names = list(inspect.signature(cls.__init__).parameters)[1:]
    assert names[: len(leading)] == leading
    assert inspect.signature(cls.__init__).parameters["clip_norm"].kind in (
        inspect.Parameter.KEYWORD_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    )


def test_positional_arguments_land_where_singa_puts_them():
    a = opt.AdaGrad(0.2, 1e-6, 0.01)
    assert (a.get_lr(), a.epsilon, a.weight_decay) == (0.2, 1e-6, 0.01)
    r = opt.RMSProp(0.2, 0.8, 1e-6, 0.01)
    assert (r.rho, r.epsilon, r.weight_decay) == (0.8, 1e-6, 0.01)
    s = opt.SGD(0.2, 0.9, 0.1, 0.01, False, np.float32)
    assert (s.momentum, s.dampening, s.weight_decay, s.dtype) == (0.9, 0.1, 0.01, np.float32)


def test_singa_defaults():
    assert opt.RMSProp().rho == 0.9 and opt.RMSProp().get_lr() == 0.1
    assert opt.AdaGrad().epsilon == 1e-8 and opt.AdaGrad().get_lr() == 0.1
    assert opt.Adam().get_lr() == 0.1 and opt.SGD().get_lr() == 0.1


def test_apply_with_a_name_updates_in_place():
    w, g = w_and_g()
    expect = w.to_numpy() - 0.1 * g.to_numpy()
    opt.SGD(lr=0.1).apply(w.name, w, g)
    np.testing.assert_allclose(w.to_numpy(), expect, rtol=1e-6)


def test_sgd_momentum_two_steps_as_singa():
    w, g = w_and_g(0.1, 0.01)
    sgd = opt.SGD(lr=0.1, momentum=0.9)
    sgd.apply("w", w, g)
    sgd.step()
    sgd.apply("w", w, g)
    buf = 0.01 + 0.9 * 0.01
    np.testing.assert_allclose(w.to_numpy(), 0.1 - 0.1 * 0.01 - 0.1 * buf, rtol=1e-6)


def test_dtype_is_checked():
    w, g = w_and_g(dtype=np.float64)
    with pytest.raises(ValueError, match="dtype"):
        opt.SGD(0.1, dtype=np.float32).apply("w", w, g)
    opt.SGD(0.1, dtype=np.float64).apply("w", w, g)
    with pytest.raises(ValueError, match="dtype"):
        opt.SGD(0.1, dtype=np.int32)


def test_lr_value_follows_the_schedule():
    sgd = opt.SGD(lr=opt.ExponentialDecay(0.1, 2, 0.5, True))
    for i in range(5):
        v = sgd.lr_value
        assert isinstance(v, Tensor) and v.shape == (1,) and v.dtype == np.float32
        np.testing.assert_allclose(tensor.to_numpy(v), [0.1 * 0.5 ** (i // 2)], rtol=1e-6)
        sgd.step()


def test_scheduler_called_with_a_step_tensor_returns_a_tensor():
    step = Tensor((1,)).set_value(3)
    out = opt.ExponentialDecay(0.1, 2, 0.5)(step)
    assert isinstance(out, Tensor) and out.shape == (1,)
    np.testing.assert_allclose(out.to_numpy(), [0.1 * 0.5**1.5], rtol=1e-6)
    assert opt.Constant(0.2)(step).to_numpy()[0] == np.float32(0.2)
    assert opt.Constant(0.2)(3) == 0.2  # a number gives a number


def test_base_optimizer_step_and_singa_states():
    o = opt.Optimizer(0.1)
    o.step()
    o.step()
    assert o.get_states()["step_counter"] == 2
    o.set_states({"step_counter": 5})
    assert o.steps == 5
    with pytest.raises(ValueError, match="step_counter"):
        o.set_states({})


def test_step_counter_is_a_float32_tensor_as_in_singa_and_steps_the_int():
    o = opt.SGD(lr=opt.ExponentialDecay(0.1, 1, 0.5))
    for _ in range(3):
        o.step()
    sc = o.step_counter
    assert isinstance(sc, Tensor) and sc.shape == (1,) and sc.dtype == np.float32
    np.testing.assert_array_equal(tensor.to_numpy(sc), [3.0])
    assert o.steps == 3 and isinstance(o.steps, int)
    np.testing.assert_allclose(tensor.to_numpy(o.lr_value), [0.1 * 0.5**3], rtol=1e-6)
    o.step_counter = Tensor((1,)).set_value(7)  # a one-element Tensor or a number sets it
    assert o.steps == 7 and o.get_lr() == pytest.approx(0.1 * 0.5**7)
    o.step_counter = 2
    assert o.steps == 2
    for bad in (-1, 1.5, [1, 2], float("nan")):
        with pytest.raises(ValueError, match="step_counter must be one whole number"):
            o.step_counter = bad
    assert o.steps == 2  # a refused value changes nothing


@pytest.mark.parametrize(
    "make, key",
    [
        (lambda: opt.SGD(0.1, momentum=0.9), "moments"),
        (lambda: opt.Adam(0.01), "m"),
        (lambda: opt.RMSProp(0.01), "running_average"),
        (lambda: opt.AdaGrad(0.1), "history"),
    ],
)
def test_singa_state_form_round_trip(make, key):
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(4)]
    wa, _ = w_and_g()
    oa = make()
    for g in grads:
        oa.apply("w", wa, Tensor(data=g))
        oa.step()
    wb, _ = w_and_g()
    ob = make()
    for g in grads[:2]:
        ob.apply("w", wb, Tensor(data=g))
        ob.step()
    states = ob.get_states()
    assert states["step_counter"] == 2 and set(states[key]) == {"w"}
    assert isinstance(states[key]["w"], Tensor)
    # restored into a fresh optimizer before it has seen the parameter
    oc = make()
    oc.set_states(states)
    wc = Tensor(data=wb.to_numpy())
    for g in grads[2:]:
        oc.apply("w", wc, Tensor(data=g))
        oc.step()
    np.testing.assert_array_equal(wa.to_numpy(), wc.to_numpy())
    # and into one that has
    ob.set_states(states)
    for g in grads[2:]:
        ob.apply("w", wb, Tensor(data=g))
        ob.step()
    np.testing.assert_array_equal(wa.to_numpy(), wb.to_numpy())


def test_singa_states_use_tensor_names_or_ids():
    sgd = opt.SGD(0.1, momentum=0.9)
    named, _ = w_and_g()
    named.name = "fc.W"
    anon, g = w_and_g()
    sgd.update(named, g)
    sgd.update(anon, g)
    assert set(sgd.get_states()["moments"]) == {"fc.W", id(anon)}


def test_singa_set_states_checks_shapes():
    sgd = opt.SGD(0.1, momentum=0.9)
    w, g = w_and_g()
    sgd.apply("w", w, g)
    with pytest.raises(ValueError, match="shape"):
        sgd.set_states({"step_counter": 1, "moments": {"w": np.zeros(4, np.float32)}})


def test_call_updates_without_stepping():
    from singa import autograd

    w = Tensor((3,), requires_grad=True, stores_grad=True).set_value(1.0)
    autograd.training = True
    try:
        loss = autograd.sum(autograd.mul(w, w))
    finally:
        autograd.training = False
    sgd = opt.SGD(0.1)
    sgd.call(loss)
    np.testing.assert_allclose(w.to_numpy(), [0.8] * 3, rtol=1e-6)
    assert sgd.steps == 0


def test_a_scheduler_written_for_singa_defines_call():
    class Halving(opt.DecayScheduler):
        def call(self, step):
            value = self.init_value * 0.5 ** float(tensor.to_numpy(step)[0])
            return tensor.from_numpy(np.full(1, value, np.float32))

    sched = Halving(0.4)
    assert sched(2) == pytest.approx(0.1)
    assert isinstance(sched(Tensor((1,)).set_value(1)), Tensor)
    sgd = opt.SGD(lr=sched)
    sgd.step()
    assert sgd.get_lr() == pytest.approx(0.2)
