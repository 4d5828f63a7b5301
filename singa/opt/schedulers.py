"""Learning-rate schedules: ``lr = scheduler(step)``.

A scheduler called with a Tensor holding the step (SINGA's form) returns a Tensor.
An optimizer given a scheduler as its ``lr`` evaluates it at the number of
completed ``backward_and_update`` calls (``optimizer.steps``), so the first
update uses ``scheduler(0)``. Every scheduler takes an optional linear warm-up:
for ``step < warmup_steps`` the rate is ``init_value * (step + 1) / warmup_steps``;
after it the schedule starts from its own step 0 (``schedule(step - warmup_steps)``).

Example::

    sgd = opt.SGD(lr=opt.ExponentialDecay(0.1, decay_steps=100, decay_rate=0.5))
    sgd.lr(250)   # 0.1 * 0.5 ** 2.5
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from singa.tensor import Tensor

__all__ = [
    "Scheduler",
    "DecayScheduler",
    "Constant",
    "ExponentialDecay",
    "StepDecay",
    "CosineDecay",
    "PolynomialDecay",
    "OneCycle",
]


def _check(cond: bool, cls: str, msg: str) -> None:
    if not cond:
        raise ValueError(f"{cls}: {msg}")


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


class Scheduler:
    """Base class: ``__call__(step) -> float`` with linear warm-up.

    Subclasses implement ``value(step)`` (the schedule after warm-up) and list their
    constructor arguments in ``_args`` (used by :meth:`get_config`).
    """

    _args: tuple[str, ...] = ()
    #: the constructor arguments counted in steps, scaled by :meth:`stretch`
    _horizon: tuple[str, ...] = ()
    _min_horizon = 1  # the fewest steps a stretched length may take

    def __init__(self, init_value: float, warmup_steps: int = 0):
        name = type(self).__name__
        _check(
            _is_number(init_value) and init_value >= 0, name, f"init_value must be >= 0, got {init_value!r}"
        )
        _check(
            isinstance(warmup_steps, int) and not isinstance(warmup_steps, bool) and warmup_steps >= 0,
            name,
            f"warmup_steps must be an int >= 0, got {warmup_steps!r}",
        )
        self.init_value = float(init_value)
        self.warmup_steps = warmup_steps

    def __call__(self, step: Any) -> Any:
        """The learning rate at ``step`` (0-based count of completed steps). Called
        with a Tensor holding the step (as SINGA's schedulers are), it returns the rate
        as a float32 Tensor of shape (1,) on that tensor's device."""
        singa_style = type(self).call is not Scheduler.call
        if isinstance(step, Tensor):
            return self.call(step)
        if singa_style:  # a subclass written for SINGA: it defines call(step tensor)
            out = self.call(Tensor((1,), data=[float(step)], requires_grad=False))
            return float(out.to_numpy().reshape(-1)[0])
        step = int(step)
        if step < 0:
            raise ValueError(f"{type(self).__name__}: step must be >= 0, got {step}")
        if step < self.warmup_steps:
            return self.init_value * (step + 1) / self.warmup_steps
        return self.value(step - self.warmup_steps)

    def call(self, step: Tensor) -> Tensor:
        """SINGA's hook: the rate at the step held by Tensor ``step``, as a float32
        Tensor of shape (1,). A subclass written for SINGA may override this instead of
        :meth:`value`."""
        value = self(int(float(step.to_numpy().reshape(-1)[0])))
        return Tensor((1,), step.device, np.float32, data=[value], requires_grad=False)

    def value(self, step: int) -> float:
        """The schedule at ``step`` steps after the warm-up."""
        raise NotImplementedError(f"{type(self).__name__}.value")

    def horizon(self) -> int | None:
        """The step at which the schedule reaches its end (warm-up included), or None
        for schedules that have no end (constant, exponential and step decay)."""
        return None

    def stretch(self, factor: float) -> None:
        """Scale the schedule along the step axis: the warm-up and every length in steps
        (``decay_steps``, ``step_size``, ``total_steps``) become ``factor`` times the
        values the scheduler was built with (rounded; at least 1 where 0 is not
        allowed). Repeated calls scale the original lengths, not the previous ones.
        ``fit(..., time_budget=...)`` uses it to end the schedule when the time does."""
        if not (_is_number(factor) and factor > 0):
            raise ValueError(f"{type(self).__name__}.stretch: factor must be > 0, got {factor!r}")
        base = self.__dict__.setdefault(
            "_unstretched", {a: getattr(self, a) for a in ("warmup_steps", *self._horizon)}
        )
        for name, v in base.items():
            low = 0 if name == "warmup_steps" else self._min_horizon
            setattr(self, name, max(low, int(round(v * factor))))

    def get_config(self) -> dict:
        """The constructor arguments as a JSON dict (``{"type": ..., ...}``)."""
        cfg = {"type": type(self).__name__, "init_value": self.init_value, "warmup_steps": self.warmup_steps}
        cfg.update({a: getattr(self, a) for a in self._args})
        return cfg

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items() if k != "type")
        return f"{type(self).__name__}({args})"


DecayScheduler = Scheduler


class Constant(Scheduler):
    """lr = init_value (after the optional warm-up)."""

    def value(self, step: int) -> float:
        return self.init_value


class ExponentialDecay(Scheduler):
    """lr = init_value * decay_rate ** (step / decay_steps); with ``staircase`` the
    exponent is floored (decay in discrete jumps every ``decay_steps`` steps)."""

    _args = ("decay_steps", "decay_rate", "staircase")
    _horizon = ("decay_steps",)

    def __init__(
        self,
        init_value: float,
        decay_steps: int,
        decay_rate: float,
        staircase: bool = False,
        warmup_steps: int = 0,
    ):
        super().__init__(init_value, warmup_steps)
        _check(
            _is_number(decay_steps) and decay_steps > 0,
            "ExponentialDecay",
            f"decay_steps must be > 0, got {decay_steps!r}",
        )
        _check(
            _is_number(decay_rate) and decay_rate > 0,
            "ExponentialDecay",
            f"decay_rate must be > 0, got {decay_rate!r}",
        )
        _check(
            isinstance(staircase, bool), "ExponentialDecay", f"staircase must be a bool, got {staircase!r}"
        )
        self.decay_steps = decay_steps
        self.decay_rate = float(decay_rate)
        self.staircase = staircase

    def value(self, step: int) -> float:
        e = step / self.decay_steps
        if self.staircase:
            e = math.floor(e)
        return self.init_value * self.decay_rate**e


class StepDecay(Scheduler):
    """lr = init_value * gamma ** (step // step_size) (PyTorch's StepLR)."""

    _args = ("step_size", "gamma")
    _horizon = ("step_size",)

    def __init__(self, init_value: float, step_size: int, gamma: float = 0.1, warmup_steps: int = 0):
        super().__init__(init_value, warmup_steps)
        _check(
            isinstance(step_size, int) and not isinstance(step_size, bool) and step_size > 0,
            "StepDecay",
            f"step_size must be an int > 0, got {step_size!r}",
        )
        _check(_is_number(gamma) and gamma > 0, "StepDecay", f"gamma must be > 0, got {gamma!r}")
        self.step_size = step_size
        self.gamma = float(gamma)

    def value(self, step: int) -> float:
        return self.init_value * self.gamma ** (step // self.step_size)


class CosineDecay(Scheduler):
    """Cosine annealing from init_value to ``alpha * init_value`` over ``decay_steps``
    steps, constant afterwards:
    lr = init_value * ((1 - alpha) * 0.5 * (1 + cos(pi * min(step, decay_steps) / decay_steps)) + alpha).
    """

    _args = ("decay_steps", "alpha")
    _horizon = ("decay_steps",)

    def horizon(self) -> int | None:
        """Warm-up plus ``decay_steps``."""
        return self.warmup_steps + int(self.decay_steps)

    def __init__(self, init_value: float, decay_steps: int, alpha: float = 0.0, warmup_steps: int = 0):
        super().__init__(init_value, warmup_steps)
        _check(
            _is_number(decay_steps) and decay_steps > 0,
            "CosineDecay",
            f"decay_steps must be > 0, got {decay_steps!r}",
        )
        _check(
            _is_number(alpha) and 0 <= alpha <= 1, "CosineDecay", f"alpha must be in [0, 1], got {alpha!r}"
        )
        self.decay_steps = decay_steps
        self.alpha = float(alpha)

    def value(self, step: int) -> float:
        t = min(step, self.decay_steps) / self.decay_steps
        return self.init_value * ((1 - self.alpha) * 0.5 * (1 + math.cos(math.pi * t)) + self.alpha)


class PolynomialDecay(Scheduler):
    """Keras's polynomial decay from init_value to ``end_value`` over ``decay_steps``
    steps, constant afterwards:
    lr = (init_value - end_value) * (1 - min(step, decay_steps) / decay_steps) ** power + end_value.
    """

    _args = ("decay_steps", "end_value", "power")
    _horizon = ("decay_steps",)

    def __init__(
        self,
        init_value: float,
        decay_steps: int,
        end_value: float = 0.0,
        power: float = 1.0,
        warmup_steps: int = 0,
    ):
        super().__init__(init_value, warmup_steps)
        _check(
            _is_number(decay_steps) and decay_steps > 0,
            "PolynomialDecay",
            f"decay_steps must be > 0, got {decay_steps!r}",
        )
        _check(
            _is_number(end_value) and end_value >= 0,
            "PolynomialDecay",
            f"end_value must be >= 0, got {end_value!r}",
        )
        _check(_is_number(power) and power > 0, "PolynomialDecay", f"power must be > 0, got {power!r}")
        self.decay_steps = decay_steps
        self.end_value = float(end_value)
        self.power = float(power)

    def horizon(self) -> int | None:
        """Warm-up plus ``decay_steps``."""
        return self.warmup_steps + int(self.decay_steps)

    def value(self, step: int) -> float:
        t = min(step, self.decay_steps) / self.decay_steps
        return (self.init_value - self.end_value) * (1 - t) ** self.power + self.end_value


class OneCycle(Scheduler):
    """The one-cycle policy (PyTorch's ``OneCycleLR`` with cosine annealing): from
    ``max_lr / div_factor`` up to ``max_lr`` over the first ``pct_start`` of
    ``total_steps``, then down to ``max_lr / (div_factor * final_div_factor)`` at step
    ``total_steps - 1`` (constant afterwards). ``init_value`` is ``max_lr``; the
    warm-up is the rising phase (``warmup_steps`` stays 0)."""

    _args = ("total_steps", "pct_start", "div_factor", "final_div_factor")
    _horizon = ("total_steps",)
    _min_horizon = 2  # one step would be the cycle's end at once: the final rate from the start

    def __init__(
        self,
        max_lr: float,
        total_steps: int,
        pct_start: float = 0.3,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
    ):
        super().__init__(max_lr, 0)
        _check(
            isinstance(total_steps, int) and not isinstance(total_steps, bool) and total_steps >= 2,
            "OneCycle",
            f"total_steps must be an int >= 2, got {total_steps!r}",
        )
        _check(
            _is_number(pct_start) and 0 < pct_start < 1,
            "OneCycle",
            f"pct_start must be in (0, 1), got {pct_start!r}",
        )
        _check(
            _is_number(div_factor) and div_factor > 0,
            "OneCycle",
            f"div_factor must be > 0, got {div_factor!r}",
        )
        _check(
            _is_number(final_div_factor) and final_div_factor > 0,
            "OneCycle",
            f"final_div_factor must be > 0, got {final_div_factor!r}",
        )
        self.total_steps = total_steps
        self.pct_start = float(pct_start)
        self.div_factor = float(div_factor)
        self.final_div_factor = float(final_div_factor)

    def get_config(self) -> dict:
        """The constructor arguments (``max_lr`` for ``init_value``)."""
        cfg = {"type": "OneCycle", "max_lr": self.init_value}
        cfg.update({a: getattr(self, a) for a in self._args})
        return cfg

    def horizon(self) -> int | None:
        """``total_steps``."""
        return int(self.total_steps)

    def value(self, step: int) -> float:
        initial = self.init_value / self.div_factor
        final = initial / self.final_div_factor
        peak = float(self.pct_start * self.total_steps) - 1
        end = float(self.total_steps - 1)
        step = min(step, int(end))
        if step <= peak:
            start_v, end_v, pct = initial, self.init_value, step / peak if peak > 0 else 1.0
        else:
            start_v, end_v, pct = self.init_value, final, (step - peak) / (end - peak)
        return end_v + (start_v - end_v) / 2.0 * (math.cos(math.pi * pct) + 1)
