"""Learning-rate schedules, their use by the optimizers, and gradient clipping."""

import math

import numpy as np
import pytest

from singa import autograd, opt
from singa.tensor import Tensor


def test_constant_and_warmup():
    assert [opt.Constant(0.1)(s) for s in range(3)] == [0.1, 0.1, 0.1]
    sched = opt.Constant(0.4, warmup_steps=4)
    np.testing.assert_allclose([sched(s) for s in range(6)], [0.1, 0.2, 0.3, 0.4, 0.4, 0.4])


def test_exponential_decay():
    sched = opt.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    np.testing.assert_allclose(
        [sched(s) for s in (0, 5, 10, 25)], [0.1, 0.1 * 0.5**0.5, 0.05, 0.1 * 0.5**2.5]
    )
    stair = opt.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5, staircase=True)
    np.testing.assert_allclose([stair(s) for s in (0, 9, 10, 29)], [0.1, 0.1, 0.05, 0.025])


def test_step_decay_matches_torch_steplr_sequence():
    sched = opt.StepDecay(1.0, step_size=3, gamma=0.5)
    np.testing.assert_allclose([sched(s) for s in range(8)], [1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25])


def test_cosine_decay_with_warmup():
    sched = opt.CosineDecay(1.0, decay_steps=4, alpha=0.2, warmup_steps=2)
    expect = [0.5, 1.0] + [0.2 + 0.8 * 0.5 * (1 + math.cos(math.pi * t / 4)) for t in range(5)] + [0.2]
    np.testing.assert_allclose([sched(s) for s in range(8)], expect)


def test_cosine_matches_torch_cosine_annealing():
    torch = pytest.importorskip("torch")
    p = torch.zeros(1, requires_grad=True)
    topt = torch.optim.SGD([p], lr=0.3)
    tsched = torch.optim.lr_scheduler.CosineAnnealingLR(topt, T_max=10, eta_min=0.03)
    sched = opt.CosineDecay(0.3, decay_steps=10, alpha=0.1)
    for s in range(10):
        assert abs(sched(s) - topt.param_groups[0]["lr"]) < 1e-12
        topt.step()
        tsched.step()


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: opt.Constant(-1.0), "init_value"),
        (lambda: opt.Constant(0.1, warmup_steps=-1), "warmup_steps"),
        (lambda: opt.ExponentialDecay(0.1, 0, 0.5), "decay_steps"),
        (lambda: opt.ExponentialDecay(0.1, 10, 0.0), "decay_rate"),
        (lambda: opt.StepDecay(0.1, 2.5), "step_size"),
        (lambda: opt.CosineDecay(0.1, 10, alpha=2.0), "alpha"),
    ],
)
def test_scheduler_validation(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def quadratic_step(o, p):
    """loss = sum(p * c): gradient c = [1, 2, 3]."""
    c = Tensor(data=np.array([[1.0], [2.0], [3.0]]), dtype=np.float64, requires_grad=False)
    prev = autograd.training
    autograd.training = True
    try:
        o(autograd.matmul(autograd.reshape(p, (1, 3)), c))
    finally:
        autograd.training = prev


def test_scheduler_steps_once_per_backward_and_update():
    sched = opt.StepDecay(0.1, step_size=2, gamma=0.5, warmup_steps=1)
    o = opt.SGD(lr=sched)
    p = Tensor(data=np.zeros(3), dtype=np.float64, requires_grad=True, stores_grad=True)
    lrs = []
    for _ in range(5):
        lrs.append(o.get_lr())
        quadratic_step(o, p)
    assert o.steps == 5
    np.testing.assert_allclose(lrs, [0.1, 0.1, 0.1, 0.05, 0.05])
    np.testing.assert_allclose(p.to_numpy(), -sum(lrs) * np.array([1.0, 2.0, 3.0]))


def test_callable_lr():
    o = opt.SGD(lr=lambda step: 1.0 / (step + 1))
    p = Tensor(data=np.zeros(3), dtype=np.float64, requires_grad=True, stores_grad=True)
    for _ in range(3):
        quadratic_step(o, p)
    np.testing.assert_allclose(p.to_numpy(), -(1 + 1 / 2 + 1 / 3) * np.array([1.0, 2.0, 3.0]))


def test_clip_by_global_norm_function():
    g1, g2 = np.array([3.0, 0.0]), np.array([[0.0], [4.0]])
    clipped, norm = opt.clip_by_global_norm([g1, g2], 1.0)
    assert norm == pytest.approx(5.0)
    np.testing.assert_allclose(clipped[0], g1 / (5 + 1e-6))
    np.testing.assert_allclose(clipped[1], g2 / (5 + 1e-6))
    np.testing.assert_array_equal(g1, [3.0, 0.0])  # inputs untouched
    same, _ = opt.clip_by_global_norm([g1, g2], 10.0)
    assert same[0] is g1 and same[1] is g2


def test_optimizer_clips_all_gradients_together():
    o = opt.SGD(1.0, clip_norm=0.5)
    p = Tensor(data=np.zeros(3), dtype=np.float64, requires_grad=True, stores_grad=True)
    quadratic_step(o, p)
    g = np.array([1.0, 2.0, 3.0])
    assert o.last_grad_norm == pytest.approx(np.sqrt(14.0))
    np.testing.assert_allclose(p.to_numpy(), -g * 0.5 / (np.sqrt(14.0) + 1e-6))
    np.testing.assert_allclose(np.linalg.norm(p.to_numpy()), 0.5, rtol=1e-5)


def test_clipping_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    gs = [rng.standard_normal((3, 4)), rng.standard_normal(5)]
    ts = [torch.zeros(g.shape, dtype=torch.float64, requires_grad=True) for g in gs]
    for t, g in zip(ts, gs):
        t.grad = torch.tensor(g)
    tnorm = torch.nn.utils.clip_grad_norm_(ts, 0.7)
    clipped, norm = opt.clip_by_global_norm(gs, 0.7)
    assert norm == pytest.approx(float(tnorm), rel=1e-12)
    for c, t in zip(clipped, ts):
        np.testing.assert_allclose(c, t.grad.numpy(), rtol=1e-12)


def test_polynomial_decay_keras_formula():
    sched = opt.PolynomialDecay(1.0, decay_steps=10, end_value=0.1, power=2.0)
    want = [(1.0 - 0.1) * (1 - min(s, 10) / 10) ** 2 + 0.1 for s in (0, 3, 10, 15)]
    np.testing.assert_allclose([sched(s) for s in (0, 3, 10, 15)], want)
    assert sched.horizon() == 10
    with pytest.raises(ValueError, match="power"):
        opt.PolynomialDecay(1.0, 10, power=0)


def _one_cycle_reference(max_lr, total, pct, div, final_div, step):
    """PyTorch's OneCycleLR (cos annealing, two phases) written out."""
    initial, low = max_lr / div, max_lr / div / final_div
    peak, end = pct * total - 1, total - 1

    def cos(a, b, p):
        return b + (a - b) / 2 * (math.cos(math.pi * p) + 1)

    if step <= peak:
        return cos(initial, max_lr, step / peak)
    return cos(max_lr, low, (step - peak) / (end - peak))


def test_one_cycle_formula_and_torch():
    sched = opt.OneCycle(0.5, total_steps=20, pct_start=0.25)
    want = [_one_cycle_reference(0.5, 20, 0.25, 25.0, 1e4, s) for s in range(20)]
    np.testing.assert_allclose([sched(s) for s in range(20)], want, rtol=1e-12)
    assert sched(4) == pytest.approx(0.5) and sched(0) == pytest.approx(0.02)
    assert sched(19) == pytest.approx(0.5 / 25 / 1e4) and sched(50) == sched(19)
    try:
        import torch
    except Exception:
        return
    p = torch.zeros(1, requires_grad=True)
    o = torch.optim.SGD([p], lr=0.1)
    s = torch.optim.lr_scheduler.OneCycleLR(
        o, max_lr=0.5, total_steps=20, pct_start=0.25, cycle_momentum=False
    )
    got = []
    for _ in range(20):
        got.append(o.param_groups[0]["lr"])
        o.step()
        s.step() if len(got) < 20 else None
    np.testing.assert_allclose([sched(i) for i in range(20)], got, rtol=1e-10)


def test_stretch_scales_the_original_lengths():
    sched = opt.CosineDecay(1.0, decay_steps=90, warmup_steps=10)
    assert sched.horizon() == 100
    sched.stretch(0.5)
    assert (sched.warmup_steps, sched.decay_steps, sched.horizon()) == (5, 45, 50)
    sched.stretch(2.0)  # from the original lengths, not the previous stretch
    assert (sched.warmup_steps, sched.decay_steps) == (20, 180)
    step = opt.StepDecay(1.0, step_size=10)
    step.stretch(0.01)
    assert step.step_size == 1 and step.horizon() is None
    cyc = opt.OneCycle(1.0, total_steps=100)
    cyc.stretch(0.3)
    assert cyc.total_steps == 30 and cyc.warmup_steps == 0
    cyc.stretch(0.001)  # a budget shorter than the cycle: still a cycle of two steps, as built
    assert cyc.total_steps == 2
    assert cyc(0) > cyc(1) == pytest.approx(1.0 / 25 / 1e4)
    with pytest.raises(ValueError, match="factor"):
        sched.stretch(0)
