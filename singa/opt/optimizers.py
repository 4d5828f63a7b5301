"""SGD, Adam, AdamW, RMSProp and AdaGrad with PyTorch's update formulas.

The constructors take SINGA's arguments in SINGA's order and with SINGA's defaults
(``SGD(lr, momentum, dampening, weight_decay, nesterov, dtype)``,
``Adam(lr, beta_1, beta_2, epsilon, weight_decay)``, ``RMSProp(lr, rho, epsilon,
weight_decay)``, ``AdaGrad(lr, epsilon, weight_decay)``); PyTorch's extra options
follow, and ``clip_norm`` is keyword-only. All updates are in place on the parameter
arrays (and on the slot arrays), and hyperparameters are validated at construction.

Where we differ from SINGA: the update formulas are PyTorch's (RMSProp and AdaGrad
divide by ``sqrt(s) + eps`` where SINGA uses ``sqrt(s + eps)``; Adam's bias correction
counts each parameter's own updates); hyperparameters are numbers, not schedules (only
``lr`` takes a scheduler). ``step_counter`` and ``lr_value`` are one-element float32
Tensors, as in SINGA; ``steps`` holds the exact int count.

Example::

    sgd = opt.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4)
    sgd(loss)                       # backward, update every parameter, step
    adam = opt.Adam(lr=opt.CosineDecay(1e-3, decay_steps=1000, warmup_steps=100))
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from singa.device import array_module
from singa.kernels.optimizer_steps import adam_step, fused_step_applies, sgd_momentum_step
from singa.opt.base import Optimizer, _number

__all__ = ["SGD", "Adam", "AdamW", "RMSProp", "AdaGrad"]


def _nonneg(cls: str, **kw: Any) -> None:
    for k, v in kw.items():
        if not (_number(v) and v >= 0):
            raise ValueError(f"{cls}: {k} must be a number >= 0, got {v!r}")


def _unit(cls: str, **kw: Any) -> None:
    for k, v in kw.items():
        if not (_number(v) and 0 <= v < 1):
            raise ValueError(f"{cls}: {k} must be in [0, 1), got {v!r}")


def _flag(cls: str, **kw: Any) -> None:
    for k, v in kw.items():
        if not isinstance(v, bool):
            raise ValueError(f"{cls}: {k} must be a bool, got {v!r}")


class SGD(Optimizer):
    """Stochastic gradient descent (torch.optim.SGD):

    g = grad + weight_decay * p;  buf = momentum * buf + (1 - dampening) * g
    (buf = g on the first step);  g = g + momentum * buf if nesterov else buf;
    p -= lr * g.
    """

    slot_names = ("momentum",)
    singa_slots = {"moments": "momentum"}

    def __init__(
        self,
        lr: Any = 0.1,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        dtype: Any = None,
        *,
        clip_norm: float | None = None,
    ):
        super().__init__(lr, dtype, clip_norm)
        _nonneg("SGD", momentum=momentum, dampening=dampening, weight_decay=weight_decay)
        _flag("SGD", nesterov=nesterov)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: nesterov needs momentum > 0 and dampening = 0")
        self.momentum = float(momentum)
        self.dampening = float(dampening)
        self.weight_decay = float(weight_decay)
        self.nesterov = nesterov

    hyperparameters = ("momentum", "dampening", "weight_decay", "nesterov")

    def _step_param(self, p, g, slots, step, lr, own):
        buf = slots.get("momentum")
        if self.momentum and buf is not None and fused_step_applies(p, g, buf):
            t = p.dtype.type
            d = self.dampening
            sgd_momentum_step(
                p.reshape(-1), g.reshape(-1), buf.reshape(-1),
                t(lr), t(self.momentum), t(1 - d), d != 0, t(self.weight_decay), self.nesterov,
            )  # fmt: skip
            return
        g, own = _weight_decay(g, p, self.weight_decay, own)
        upd = g
        if self.momentum:
            buf = slots.get("momentum")
            if buf is None:
                buf = slots["momentum"] = g.copy()
            else:
                buf *= self.momentum
                if self.dampening == 0:
                    buf += g  # (1 - 0) * g is g
                elif own and not self.nesterov:
                    g *= 1 - self.dampening
                    buf += g
                else:
                    buf += (1 - self.dampening) * g
            if self.nesterov:
                t = self.momentum * buf
                if own:
                    g += t
                else:
                    g, own = g + t, True
                upd = g
            else:
                upd = buf
        if own:  # g is scratch: p -= lr * upd without a temporary
            array_module(p).multiply(upd, lr, out=g)
            p -= g
        else:
            p -= lr * upd


def _weight_decay(g, p, wd, own):
    """g + wd * p (into g when owned); the result is always owned."""
    if not wd:
        return g, own
    t = wd * p
    if own:
        g += t
        return g, True
    return g + t, True


class Adam(Optimizer):
    """Adam (torch.optim.Adam), with L2 ``weight_decay`` added to the gradient:

    g = grad + weight_decay * p;  m = beta1 * m + (1 - beta1) * g;
    v = beta2 * v + (1 - beta2) * g * g;  (amsgrad: v_max = max(v_max, v), used for v)
    p -= lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps).
    """

    slot_names = ("m", "v", "max_v")
    singa_slots = {"m": "m", "v": "v"}
    _decoupled = False

    def __init__(
        self,
        lr: Any = 0.1,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        dtype: Any = None,
        *,
        clip_norm: float | None = None,
    ):
        super().__init__(lr, dtype, clip_norm)
        cls = type(self).__name__
        _unit(cls, beta_1=beta_1, beta_2=beta_2)
        _nonneg(cls, epsilon=epsilon, weight_decay=weight_decay)
        _flag(cls, amsgrad=amsgrad)
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)
        self.weight_decay = float(weight_decay)
        self.amsgrad = amsgrad

    hyperparameters = ("beta_1", "beta_2", "epsilon", "weight_decay", "amsgrad")

    def _init_slots(self, p):
        xp = array_module(p)
        slots = {"m": xp.zeros_like(p), "v": xp.zeros_like(p)}
        if self.amsgrad:
            slots["max_v"] = xp.zeros_like(p)
        return slots

    def _step_param(self, p, g, slots, step, lr, own):
        xp = array_module(p)
        b1, b2 = self.beta_1, self.beta_2
        if self.amsgrad and slots.get("max_v") is None:
            slots["max_v"] = xp.zeros_like(p)
        ours = [slots["m"], slots["v"]] + ([slots["max_v"]] if self.amsgrad else [])
        if fused_step_applies(p, g, *ours):
            wd = self.weight_decay
            hyper = [wd, 1 - lr * wd, b1, 1 - b1, b2, 1 - b2, math.sqrt(1 - b2**step), self.epsilon]
            hyper = np.array(hyper + [lr / (1 - b1**step)], dtype=p.dtype)
            flat = [a.reshape(-1) for a in (p, g, *ours[:2], ours[-1])]
            adam_step(*flat, hyper, self._decoupled and wd != 0, self.amsgrad)
            return
        if self.weight_decay and self._decoupled:
            p *= 1 - lr * self.weight_decay
        elif self.weight_decay:
            g, own = _weight_decay(g, p, self.weight_decay, own)
        m, v = slots["m"], slots["v"]
        gg = g * g
        gg *= 1 - b2
        m *= b1
        if own:
            g *= 1 - b1
            m += g
        else:
            m += (1 - b1) * g
        v *= b2
        v += gg
        del gg
        if self.amsgrad:
            vmax = slots.get("max_v")
            if vmax is None:
                vmax = slots["max_v"] = xp.zeros_like(p)
            xp.maximum(vmax, v, out=vmax)
            v = vmax
        step_size = lr / (1 - b1**step)
        denom = xp.sqrt(v)
        denom /= math.sqrt(1 - b2**step)
        denom += self.epsilon
        xp.divide(m, denom, out=denom)
        denom *= step_size
        p -= denom


class AdamW(Adam):
    """AdamW (torch.optim.AdamW): Adam with decoupled weight decay,
    p *= 1 - lr * weight_decay before the Adam step (default weight_decay 0.01)."""

    _decoupled = True

    def __init__(
        self,
        lr: Any = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-8,
        weight_decay: float = 0.01,
        amsgrad: bool = False,
        dtype: Any = None,
        *,
        clip_norm: float | None = None,
    ):
        super().__init__(lr, beta_1, beta_2, epsilon, weight_decay, amsgrad, dtype, clip_norm=clip_norm)


class RMSProp(Optimizer):
    """RMSProp (torch.optim.RMSprop):

    g = grad + weight_decay * p;  s = rho * s + (1 - rho) * g * g;
    centered: a = rho * a + (1 - rho) * g, avg = sqrt(s - a * a) + eps, else avg = sqrt(s) + eps;
    momentum > 0: buf = momentum * buf + g / avg, p -= lr * buf;  else p -= lr * g / avg.
    """

    slot_names = ("square_avg", "grad_avg", "momentum")
    singa_slots = {"running_average": "square_avg"}

    def __init__(
        self,
        lr: Any = 0.1,
        rho: float = 0.9,
        epsilon: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
        dtype: Any = None,
        *,
        clip_norm: float | None = None,
    ):
        super().__init__(lr, dtype, clip_norm)
        _unit("RMSProp", rho=rho)
        _nonneg("RMSProp", epsilon=epsilon, weight_decay=weight_decay, momentum=momentum)
        _flag("RMSProp", centered=centered)
        self.rho = float(rho)
        self.epsilon = float(epsilon)
        self.weight_decay = float(weight_decay)
        self.momentum = float(momentum)
        self.centered = centered

    hyperparameters = ("rho", "epsilon", "weight_decay", "momentum", "centered")

    def _init_slots(self, p):
        xp = array_module(p)
        slots = {"square_avg": xp.zeros_like(p)}
        if self.centered:
            slots["grad_avg"] = xp.zeros_like(p)
        if self.momentum:
            slots["momentum"] = xp.zeros_like(p)
        return slots

    def _slot(self, slots, name, p):
        s = slots.get(name)
        if s is None:
            s = slots[name] = array_module(p).zeros_like(p)
        return s

    def _step_param(self, p, g, slots, step, lr, own):
        xp = array_module(p)
        rho = self.rho
        g, own = _weight_decay(g, p, self.weight_decay, own)
        s = slots["square_avg"]
        gg = g * g
        gg *= 1 - rho
        s *= rho
        s += gg
        if self.centered:
            a = self._slot(slots, "grad_avg", p)
            a *= rho
            a += (1 - rho) * g
            avg = a * a
            xp.subtract(s, avg, out=avg)
            xp.sqrt(avg, out=avg)
        else:
            avg = xp.sqrt(s)
        avg += self.epsilon
        xp.divide(g, avg, out=avg)  # avg now holds g / avg
        if self.momentum:
            buf = self._slot(slots, "momentum", p)
            buf *= self.momentum
            buf += avg
            xp.multiply(buf, lr, out=avg)
        else:
            avg *= lr
        p -= avg


class AdaGrad(Optimizer):
    """AdaGrad (torch.optim.Adagrad):

    g = grad + weight_decay * p;  clr = lr / (1 + (t - 1) * lr_decay);
    sum += g * g;  p -= clr * g / (sqrt(sum) + eps).
    """

    slot_names = ("sum",)
    singa_slots = {"history": "sum"}

    def __init__(
        self,
        lr: Any = 0.1,
        epsilon: float = 1e-8,
        weight_decay: float = 0.0,
        lr_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        dtype: Any = None,
        *,
        clip_norm: float | None = None,
    ):
        super().__init__(lr, dtype, clip_norm)
        _nonneg(
            "AdaGrad",
            lr_decay=lr_decay,
            weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value,
            epsilon=epsilon,
        )
        self.lr_decay = float(lr_decay)
        self.weight_decay = float(weight_decay)
        self.initial_accumulator_value = float(initial_accumulator_value)
        self.epsilon = float(epsilon)

    hyperparameters = ("lr_decay", "weight_decay", "initial_accumulator_value", "epsilon")

    def _init_slots(self, p):
        s = array_module(p).zeros_like(p)
        if self.initial_accumulator_value:
            s += self.initial_accumulator_value
        return {"sum": s}

    def _step_param(self, p, g, slots, step, lr, own):
        xp = array_module(p)
        g, own = _weight_decay(g, p, self.weight_decay, own)
        clr = lr / (1 + (step - 1) * self.lr_decay)
        s = slots["sum"]
        gg = g * g
        s += gg
        del gg
        std = xp.sqrt(s)
        std += self.epsilon
        xp.divide(g, std, out=std)
        std *= clr
        p -= std
