"""Dynamic loss scaling (PyTorch's ``GradScaler``) for float16 training.

An optimizer whose ``loss_scaler`` is set (``Model.compile(..., precision="mixed")``
sets one) runs ``optimizer(loss)`` as:

1. put the master weights back (:meth:`singa.model.precision.Autocast.restore_masters`);
2. back-propagate from ``loss * scale``, so small float16 gradients do not flush to zero;
3. unscale every gradient in float32 (``g * (1 / scale)``, exact: the scale is a power of two);
4. if any gradient holds inf or NaN, skip the update and multiply the scale by
   ``backoff_factor``; otherwise clip (``clip_norm``, on the unscaled gradients), update,
   and after ``growth_interval`` good steps in a row multiply the scale by ``growth_factor``;
5. advance the optimizer's ``step_counter`` (and so the schedule) in both cases, as a
   PyTorch loop calls ``scheduler.step()`` every iteration; a skipped step leaves the
   parameters, the slots and the per-parameter step counts as they were.

Steps 3-4 are one recorded kernel, so graph replays take the same decisions as eager
steps on the same values (replay == eager, bitwise).

Data-parallel training: every rank must take the same decision. A
:class:`~singa.opt.DistOpt` runs the step through its scaler with the mean of the
ranks' scaled gradients and its ``all_reduce_any`` vote, so every rank unscales the
same gradients and skips (or updates) together. Custom loops pass
``all_reduce_flag`` (``bool -> bool``, True when any rank found inf/NaN) to the
scaler, or give the optimizer an ``all_reduce_any`` method with that meaning.

Example::

    sgd = opt.SGD(0.05, momentum=0.9)
    sgd.loss_scaler = opt.LossScaler()          # what precision="mixed" does
    sgd(loss)                                   # scaled backward, checked update
    sgd.loss_scaler.scale, sgd.loss_scaler.skipped_steps
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

import singa.autograd as _ag
from singa.autograd import elementwise, engine
from singa.device import array_module
from singa.opt.base import clip_by_global_norm
from singa.tensor import Tensor

__all__ = ["LossScaler"]


def _positive(name: str, v: Any, above: float = 0.0) -> float:
    ok = isinstance(v, int | float | np.floating | np.integer) and not isinstance(v, bool)
    if not ok or not np.isfinite(v) or v <= above:
        raise ValueError(f"LossScaler: {name} must be a finite number > {above:g}, got {v!r}")
    return float(v)


@contextlib.contextmanager
def _unrecorded(dev: Any) -> Iterator[None]:
    """Run eagerly without reporting to the device's recorder (the caller records
    the whole step as one kernel)."""
    rec = dev.recorder
    dev.recorder = None
    try:
        yield
    finally:
        dev.recorder = rec


class LossScaler:
    """Dynamic loss scaling with PyTorch's defaults.

    Args:
        init_scale: the first scale (2**16).
        growth_factor: multiplies the scale after ``growth_interval`` good steps (2.0).
        backoff_factor: multiplies the scale after a step with inf/NaN gradients (0.5).
        growth_interval: good steps in a row before the scale grows (2000).
        all_reduce_flag: for data-parallel training, ``found_inf -> found_inf on any
            rank``; None uses the optimizer's ``all_reduce_any`` when it has one.

    Attributes:
        scale: the current scale.
        growth_tracker: good steps since the scale last changed.
        skipped_steps: steps skipped because of inf/NaN gradients.
        last_step_skipped: whether the last step was skipped.
        precision: the model precision this scaler serves ("mixed"), saved with its
            state so that a checkpoint says how it was trained.
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        all_reduce_flag: Callable[[bool], bool] | None = None,
    ):
        self.init_scale = _positive("init_scale", init_scale)
        self.growth_factor = _positive("growth_factor", growth_factor, 1.0)
        self.backoff_factor = _positive("backoff_factor", backoff_factor)
        if self.backoff_factor >= 1.0:
            raise ValueError(f"LossScaler: backoff_factor must be < 1, got {backoff_factor!r}")
        if not isinstance(growth_interval, int | np.integer) or isinstance(growth_interval, bool):
            raise ValueError(f"LossScaler: growth_interval must be an int >= 1, got {growth_interval!r}")
        if growth_interval < 1:
            raise ValueError(f"LossScaler: growth_interval must be an int >= 1, got {growth_interval!r}")
        self.growth_interval = int(growth_interval)
        self.all_reduce_flag = all_reduce_flag
        self._scale_tensors: dict[int, Tensor] = {}
        self._scale = self.init_scale
        self.growth_tracker = 0
        self.skipped_steps = 0
        self.last_step_skipped = False
        self.precision = "mixed"

    @property
    def scale(self) -> float:
        """The current scale (setting it also updates the arrays graph replays read)."""
        return self._scale

    @scale.setter
    def scale(self, value: float) -> None:
        self._scale = float(value)
        for t in self._scale_tensors.values():
            t.data[...] = self._scale

    # ----- the step ----------------------------------------------------------------------------
    def scale_tensor(self, dev: Any) -> Tensor:
        """The scale as a float32 scalar Tensor on ``dev``, updated in place (graph
        replays read its current value)."""
        t = self._scale_tensors.get(dev.id)
        if t is None:
            t = Tensor((), dev, np.float32, requires_grad=False)
            self._scale_tensors[dev.id] = t
        t.data[...] = self.scale
        return t

    def backward_and_update(
        self,
        optimizer: Any,
        loss: Tensor,
        dy: Any = None,
        reduce_grads: Callable[[Any, list, list], list] | None = None,
        any_rank: Callable[[bool], bool] | None = None,
    ) -> None:
        """``optimizer(loss)`` with loss scaling (see the module docstring).

        Data-parallel steps (:class:`~singa.opt.DistOpt`) pass ``reduce_grads``
        (``(device, parameters, scaled gradient arrays) -> their mean over the ranks``, recorded
        by the caller) and ``any_rank`` (the inf/NaN vote, used when the scaler has
        no ``all_reduce_flag``)."""
        active = _ag.autocast
        if active is not None:
            active.restore_masters()
        dev = loss.device
        scale = self.scale_tensor(dev)
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is handled below
            pairs = list(engine.backward(elementwise.mul(loss, scale), dy, retain_graph=False))
        if pairs:
            params = [p for p, _ in pairs]
            grads = [g.data for _, g in pairs]
            if reduce_grads is not None:
                with np.errstate(over="ignore", invalid="ignore"):
                    grads = list(reduce_grads(dev, params, grads))
            arrays = grads + [p.data for p in params] + [scale.data]
            finish = functools.partial(self._finish, optimizer, params, any_rank)
            with _unrecorded(dev):
                finish(*arrays)
            if dev.recorder is not None:
                dev.recorder.record(finish, arrays, ())
        optimizer.step(dev)

    def _finish(self, optimizer: Any, params: list[Tensor], any_rank: Any, *arrays: Any) -> None:
        """Unscale, check, clip and update (or skip), then adjust the scale. ``arrays``
        are the gradients, then the parameters and the scale (passed so that a graph
        orders this kernel after everything that reads them)."""
        grads = arrays[: len(params)]
        inv = np.float32(1.0 / self.scale)
        unscaled = [_unscale(g, inv) for g in grads]
        found = not all(bool(array_module(g).isfinite(g).all()) for g in unscaled)
        found = self._agree(optimizer, found, any_rank)
        if not found:
            if optimizer.clip_norm is not None:
                unscaled, optimizer.last_grad_norm = clip_by_global_norm(unscaled, optimizer.clip_norm)
            for p, g in zip(params, unscaled):
                optimizer.update(p, g)
        self.update(found)

    def _agree(self, optimizer: Any, found: bool, any_rank: Any = None) -> bool:
        reduce = self.all_reduce_flag or any_rank or getattr(optimizer, "all_reduce_any", None)
        return bool(reduce(found)) if reduce is not None else found

    def update(self, found_inf: bool) -> None:
        """Adjust the scale after a step: shrink on inf/NaN, grow after
        ``growth_interval`` good steps."""
        self.last_step_skipped = bool(found_inf)
        if found_inf:
            self.scale *= self.backoff_factor
            self.growth_tracker = 0
            self.skipped_steps += 1
            return
        self.growth_tracker += 1
        if self.growth_tracker == self.growth_interval:
            self.scale *= self.growth_factor
            self.growth_tracker = 0

    # ----- state ---------------------------------------------------------------------------------
    _STATE_KEYS = (
        "scale",
        "growth_tracker",
        "skipped_steps",
        "init_scale",
        "growth_factor",
        "backoff_factor",
        "growth_interval",
    )

    def get_states(self) -> dict:
        """The scaler's state and the precision (JSON values) for checkpoints."""
        return {"precision": self.precision, **{k: getattr(self, k) for k in self._STATE_KEYS}}

    def check_states(self, states: Any) -> list[str]:
        """What is wrong with ``states`` (empty when :meth:`set_states` will take it)."""
        if not isinstance(states, Mapping):
            return [f"loss_scaler: expected a dict, got {type(states).__name__}"]
        problems = [f"loss_scaler: missing {k}" for k in self._STATE_KEYS if k not in states]
        for k in ("scale", "init_scale", "growth_factor", "backoff_factor"):
            v = states.get(k)
            if k in states and not (_number(v) and v > 0):
                problems.append(f"loss_scaler: {k} must be a number > 0, got {v!r}")
        for k in ("growth_tracker", "skipped_steps", "growth_interval"):
            v = states.get(k)
            if k in states and not (isinstance(v, int | np.integer) and not isinstance(v, bool) and v >= 0):
                problems.append(f"loss_scaler: {k} must be an int >= 0, got {v!r}")
        return problems

    def set_states(self, states: Mapping) -> None:
        """Restore :meth:`get_states` (ValueError, and no change, when invalid)."""
        problems = self.check_states(states)
        if problems:
            raise ValueError("; ".join(problems))
        for k in ("scale", "init_scale", "growth_factor", "backoff_factor"):
            setattr(self, k, float(states[k]))
        for k in ("growth_tracker", "skipped_steps", "growth_interval"):
            setattr(self, k, int(states[k]))
        if isinstance(states.get("precision"), str):
            self.precision = states["precision"]

    def __repr__(self) -> str:
        return (
            f"LossScaler(scale={self.scale:g}, growth_factor={self.growth_factor:g}, "
            f"backoff_factor={self.backoff_factor:g}, growth_interval={self.growth_interval})"
        )


def _number(v: Any) -> bool:
    return (
        isinstance(v, int | float | np.floating | np.integer) and not isinstance(v, bool) and np.isfinite(v)
    )


def _unscale(g: Any, inv: np.float32) -> Any:
    """``g * inv`` as a new float32 array (exact for a power-of-two scale)."""
    return array_module(g).multiply(g, inv, dtype=np.float32)
