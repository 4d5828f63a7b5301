"""The optimizer base class: learning rate or schedule, step counting, gradient
clipping by global norm, state for checkpoints, and graph recording.

Subclasses implement ``_init_slots(p)`` (the per-parameter state arrays, created on
a parameter's first update) and ``_step_param(p, g, slots, step, lr)`` (the in-place
update of parameter array ``p`` from gradient ``g``; ``step`` is this parameter's
update count, starting at 1).

While a device's graph recorder is set (``Model.compile(..., use_graph=True)``),
every update is recorded as ``record(update, [param_array, grad_array], ())`` where
``update`` is a :class:`~singa.autograd.engine.DonatingUpdate` of :meth:`Optimizer._apply`
(so replays may hand it a dead gradient as scratch space); it looks up the learning
rate, the step counts and the slots when it runs, so replays advance schedules exactly
as eager steps do, and slots replaced by :meth:`Optimizer.set_states` are picked up.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from singa.autograd import engine
from singa.device import array_module
from singa.opt.schedulers import Scheduler
from singa.tensor import Tensor

__all__ = ["Optimizer", "clip_by_global_norm"]


def _number(v: Any) -> bool:
    return (
        isinstance(v, int | float | np.floating | np.integer) and not isinstance(v, bool) and math.isfinite(v)
    )


def _host(a: Any) -> np.ndarray:
    """A numpy copy of a numpy or cupy array."""
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.array(a, copy=True)


def _float_dtype(cls: str, dtype: Any) -> np.dtype | None:
    if dtype is None:
        return None
    try:
        d = np.dtype(dtype)
    except TypeError:
        d = None
    if d is None or d.kind != "f":
        raise ValueError(
            f"{cls}: dtype must be None or a floating dtype (tensor.float16, ...), got {dtype!r}"
        )
    return d


def _scaler_states(scaler: Any) -> dict:
    """The loss scaler's entry of the optimizer states (none without a scaler)."""
    return {} if scaler is None else {"loss_scaler": scaler.get_states()}


def _scaler_problems(scaler: Any, states: Mapping) -> list[str]:
    """What is wrong with the states' loss-scaler entry (a checkpoint without one, or
    an optimizer without a scaler, is fine: float32 and mixed checkpoints load both ways)."""
    given = states.get("loss_scaler")
    return [] if given is None or scaler is None else scaler.check_states(given)


def _restore_scaler(scaler: Any, states: Mapping) -> None:
    given = states.get("loss_scaler")
    if given is not None and scaler is not None:
        scaler.set_states(given)


def global_norm(arrays: list) -> float:
    """sqrt of the sum of squares of every element of ``arrays`` (computed in each
    array's dtype, summed in float64)."""
    total = 0.0
    for g in arrays:
        flat = g.reshape(-1)
        total += float(flat @ flat)
    return math.sqrt(total)


def clip_by_global_norm(grads: list, max_norm: float) -> tuple[list, float]:
    """Scale ``grads`` (arrays) by ``max_norm / (norm + 1e-6)`` when their global norm
    exceeds ``max_norm`` (PyTorch's ``clip_grad_norm_``). Returns (new arrays, norm);
    the inputs are never modified."""
    norm = global_norm(grads)
    coef = max_norm / (norm + 1e-6)
    if coef < 1.0:
        return [g * coef for g in grads], norm
    return list(grads), norm


class Optimizer:
    """Base class of the optimizers.

    Args:
        lr: a learning rate (number >= 0), a :class:`~singa.opt.Scheduler`, or any
            callable ``step -> float``; evaluated at ``steps`` on every update.
        clip_norm: when given, ``backward_and_update`` scales all gradients together
            so that their global L2 norm is at most ``clip_norm``.
        dtype: SINGA's ``dtype``: the dtype of the parameters this optimizer updates
            (``tensor.float16`` for SINGA's pure float16 training); a parameter of
            another dtype raises ValueError. None (default) accepts any.

    Attributes:
        lr: may be changed between steps (also while a model replays its graph).
        steps: completed ``backward_and_update`` (or :meth:`step`) calls, an int.
        step_counter: the same count as SINGA holds it, a float32 Tensor of shape (1,).
        last_grad_norm: the global gradient norm of the last clipped step.
        loss_scaler: a :class:`~singa.opt.scaler.LossScaler` (set by
            ``Model.compile(..., precision="mixed")``) that ``backward_and_update``
            then runs through; None by default.
    """

    #: names of the per-parameter state arrays this optimizer may keep
    slot_names: tuple[str, ...] = ()

    def __init__(self, lr: float | Callable[[int], float], dtype: Any = None, clip_norm: float | None = None):
        name = type(self).__name__
        if not (isinstance(lr, Scheduler) or callable(lr) or (_number(lr) and lr >= 0)):
            raise ValueError(f"{name}: lr must be a number >= 0 or a scheduler, got {lr!r}")
        if clip_norm is not None and not (_number(clip_norm) and clip_norm > 0):
            raise ValueError(f"{name}: clip_norm must be None or a number > 0, got {clip_norm!r}")
        self.lr: float | Callable[[int], float] = lr if callable(lr) else float(lr)
        self.clip_norm = None if clip_norm is None else float(clip_norm)
        self.dtype = _float_dtype(name, dtype)
        self.loss_scaler: Any = None
        self.steps = 0
        self.last_grad_norm: float | None = None
        self._slots: dict[Tensor, dict[str, Any]] = {}
        self._param_steps: dict[Tensor, int] = {}
        self._names: dict[Tensor, Any] = {}
        self._pending: dict[Any, tuple[dict[str, Any], int]] = {}

    # ----- the learning rate and steps ------------------------------------------------
    def get_lr(self) -> float:
        """The learning rate of the current step."""
        lr = self.lr
        return float(lr(self.steps)) if callable(lr) else float(lr)

    @property
    def lr_value(self) -> Tensor:
        """The learning rate of the current step as a float32 Tensor of shape (1,)
        (SINGA's attribute; :meth:`get_lr` gives the number)."""
        return Tensor((1,), data=np.array([self.get_lr()]), dtype=np.float32, requires_grad=False)

    @property
    def step_counter(self) -> Tensor:
        """The completed steps as SINGA's optimizers hold them: a float32 Tensor of shape
        (1,) (a new one on each read; :attr:`steps` is the int). Assigning a number or a
        one-element Tensor sets :attr:`steps`."""
        return Tensor((1,), data=np.array([self.steps]), dtype=np.float32, requires_grad=False)

    @step_counter.setter
    def step_counter(self, value: Any) -> None:
        arr = _host(value.data if isinstance(value, Tensor) else np.asarray(value)).reshape(-1)
        if arr.size != 1 or not np.isfinite(arr[0]) or arr[0] < 0 or arr[0] != int(arr[0]):
            raise ValueError(f"step_counter must be one whole number >= 0, got {value!r}")
        self.steps = int(arr[0])

    def step(self, dev: Any = None) -> None:
        """Finish a step: advance ``steps`` (and so the schedule). Called by
        :meth:`backward_and_update`; call it yourself after a loop of :meth:`update`
        calls if you use a scheduler."""
        self._advance()
        if dev is not None and dev.recorder is not None:
            dev.recorder.record(self._advance, [], ())

    def _advance(self) -> None:
        self.steps += 1

    # ----- updates ----------------------------------------------------------------------
    def update(self, param: Tensor, grad: Any) -> None:
        """Update ``param`` in place from its gradient (a Tensor or an array)."""
        if grad is None:
            return
        g = grad.data if isinstance(grad, Tensor) else grad
        p = param.data
        if g.shape != p.shape:
            raise ValueError(
                f"{type(self).__name__}.update: gradient of shape {g.shape} "
                f"for a parameter of shape {p.shape}"
            )
        if self.dtype is not None and p.dtype != self.dtype:
            raise ValueError(
                f"{type(self).__name__}.update: a {p.dtype} parameter for an optimizer "
                f"built with dtype={self.dtype}"
            )
        self._apply(param, p, g)
        rec = param.device.recorder
        if rec is not None:
            rec.record(engine.DonatingUpdate(self._apply, param), [p, g], ())

    def apply(self, param_name: Any, param_value: Tensor, param_grad: Any) -> None:
        """SINGA's form of :meth:`update`: update ``param_value`` in place from
        ``param_grad``; ``param_name`` names the parameter in the SINGA form of
        :meth:`get_states` (the state itself belongs to the tensor)."""
        if param_name is not None:
            self._names[param_value] = param_name
        self.update(param_value, param_grad)

    def call(self, loss: Tensor) -> None:
        """SINGA's ``call``: back-propagate from ``loss`` and update every parameter,
        without :meth:`step` (``opt(loss)`` does both)."""
        for p, g in engine.backward(loss, retain_graph=False):
            self.update(p, g)

    def _apply(self, param: Tensor, p: Any, g: Any, donate: bool = False) -> None:
        """Update array ``p`` (of ``param``) from gradient array ``g``. With ``donate``
        the caller hands ``g`` over: it may be overwritten (graph replay passes it
        when the gradient is dead and exclusively owned)."""
        slots = self._slots.get(param)
        if slots is None:
            slots = self._slots[param] = self._first_slots(param, p)
        step = self._param_steps.get(param, 0) + 1
        self._param_steps[param] = step
        own = donate and g.dtype == p.dtype and g.shape == p.shape
        self._step_param(p, g, slots, step, self.get_lr(), own)

    def _first_slots(self, param: Tensor, p: Any) -> dict:
        """The slots of a parameter's first update: fresh ones, or those given for its
        name to the SINGA form of :meth:`set_states` before it was seen."""
        pending = self._pending.pop(self.param_key(param), None) if self._pending else None
        if pending is None:
            return self._init_slots(p)
        slots, step = pending
        self._param_steps[param] = step
        xp = array_module(p)
        return {k: xp.asarray(v, dtype=p.dtype).reshape(p.shape).copy() for k, v in slots.items()}

    def param_key(self, param: Tensor) -> Any:
        """The name of ``param`` in the SINGA form of the states: the name given to
        :meth:`apply`, else ``param.name``, else ``id(param)`` (as SINGA names it)."""
        key = self._names.get(param)
        if key is None:
            key = param.name if param.name is not None else id(param)
        return key

    def _init_slots(self, p: Any) -> dict:
        return {}

    def _step_param(self, p: Any, g: Any, slots: dict, step: int, lr: float, own: bool) -> None:
        """The update; ``own`` says ``g`` may be used as scratch. Whichever buffers
        are used, the arithmetic must be the same, so results do not depend on it."""
        raise NotImplementedError(f"{type(self).__name__}._step_param")

    def backward_and_update(self, loss: Tensor, dy: Any = None) -> None:
        """Back-propagate from ``loss`` and update every parameter that stores its
        gradient (clipping first when ``clip_norm`` is set), then :meth:`step`.
        With a ``loss_scaler`` the scaler runs the step (scaled loss, unscaled and
        checked gradients)."""
        if self.loss_scaler is not None:
            self.loss_scaler.backward_and_update(self, loss, dy)
            return
        if self.clip_norm is None:
            for p, g in engine.backward(loss, dy, retain_graph=False):
                self.update(p, g)
        else:
            pairs = list(engine.backward(loss, dy, retain_graph=False))
            if pairs:
                garrs = [g.data for _, g in pairs]
                clipped = self._clip(*garrs)
                rec = loss.device.recorder
                if rec is not None:
                    rec.record(self._clip, garrs, clipped)
                for (p, _), g in zip(pairs, clipped):
                    self.update(p, g)
        self.step(loss.device)

    __call__ = backward_and_update

    def _clip(self, *grads: Any) -> tuple:
        if self.clip_norm is None:
            return grads
        clipped, self.last_grad_norm = clip_by_global_norm(list(grads), self.clip_norm)
        return tuple(clipped)

    # ----- state --------------------------------------------------------------------------
    #: names of the attributes reported with the state and in repr (subclasses list theirs)
    hyperparameters: tuple[str, ...] = ()

    def _hyper(self) -> dict:
        return {k: getattr(self, k) for k in self.hyperparameters}

    #: SINGA's name of each slot dict in its ``get_states()`` (subclasses list theirs)
    singa_slots: dict[str, str] = {}

    def get_states(self, names: Mapping[str, Tensor] | None = None) -> dict:
        """Everything needed to resume: step counts, learning rate or schedule,
        hyperparameters (for information) and, under ``"slots"``, copies of the state
        arrays as numpy arrays named ``"<param name>/<slot>"``. ``names`` maps parameter
        names to the parameter Tensors (e.g. ``model.get_params()``).

        Without ``names``, SINGA's form: ``{"step_counter": steps}`` plus, per slot
        (``"moments"`` of SGD, ``"m"`` and ``"v"`` of Adam, ``"running_average"`` of
        RMSProp, ``"history"`` of AdaGrad), a dict ``{param name: Tensor}`` (copies),
        the names being :meth:`param_key`."""
        if names is None:
            return self._singa_states()
        slots: dict[str, np.ndarray] = {}
        param_steps: dict[str, int] = {}
        for name, t in names.items():
            param_steps[name] = int(self._param_steps.get(t, 0))
            for k, arr in self._slots.get(t, {}).items():
                slots[f"{name}/{k}"] = _host(arr)
        lr = self.lr
        return {
            "type": type(self).__name__,
            "step": int(self.steps),
            "lr": lr if isinstance(lr, float) else None,
            "scheduler": lr.get_config() if isinstance(lr, Scheduler) else None,
            "hyper": self._hyper(),
            "param_steps": param_steps,
            "slots": slots,
            **_scaler_states(self.loss_scaler),
        }

    def _singa_states(self) -> dict:
        out: dict[str, Any] = {"step_counter": float(self.steps)}
        for singa_name, slot in self.singa_slots.items():
            got = {
                self.param_key(t): Tensor.wrap(arr.copy(), t.device)
                for t, slots in self._slots.items()
                for k, arr in slots.items()
                if k == slot
            }
            if got:
                out[singa_name] = got
        return out

    def set_states(self, states: Mapping, names: Mapping[str, Tensor] | None = None) -> None:
        """Restore what :meth:`get_states` returned. Everything is validated first
        (optimizer type, step counts, unknown or missing parameter names, slot names,
        shapes and dtypes); one ValueError lists every problem and nothing changes.
        A numeric ``lr`` is restored when this optimizer's lr is a number; a schedule
        and the hyperparameters stay as constructed.

        Without ``names``, SINGA's form (see :meth:`get_states`): ``step_counter`` and
        the slot dicts keyed by parameter name; slots of parameters not updated yet are
        taken up at their first update under that name."""
        cls = type(self).__name__
        if not isinstance(states, Mapping):
            raise ValueError(f"{cls}.set_states: expected a dict, got {type(states).__name__}")
        if names is None:
            self._set_singa_states(states)
            return
        problems = _check_header(cls, states)
        psteps, more = _check_param_steps(states, names)
        problems += more
        slots, more = _check_slots(cls, states, names, self.slot_names)
        problems += more
        problems += _scaler_problems(self.loss_scaler, states)
        if problems:
            raise ValueError(f"{cls}.set_states: " + "; ".join(problems))
        _restore_scaler(self.loss_scaler, states)
        self._slots = _device_slots(slots, names)
        self._param_steps = {names[n]: int(v) for n, v in psteps.items()}
        self.steps = int(states["step"])
        lr = states.get("lr")
        if lr is not None and isinstance(self.lr, float):
            self.lr = float(lr)

    def _set_singa_states(self, states: Mapping) -> None:
        cls = type(self).__name__
        step = _singa_step(cls, states)
        by_key = {self.param_key(t): t for t in self._slots}
        slots = _singa_slot_arrays(cls, states, self.singa_slots, by_key)
        self.steps = step
        self._pending = {}
        for key, arrs in slots.items():
            t = by_key.get(key)
            if t is None:
                self._pending[key] = (arrs, step)
                continue
            xp = t.device.xp
            self._slots[t].update({k: xp.asarray(a, dtype=t.dtype).copy() for k, a in arrs.items()})
            self._param_steps[t] = step

    def __repr__(self) -> str:
        hyper = ", ".join(f"{k}={v!r}" for k, v in self._hyper().items())
        return f"{type(self).__name__}(lr={self.lr!r}, {hyper})"


def _singa_step(cls: str, states: Mapping) -> int:
    """The ``step_counter`` of SINGA's state form, checked."""
    step = states.get("step_counter")
    if step is None:
        raise ValueError(f"{cls}.set_states: step_counter is missing")
    arr = _host(step.data if isinstance(step, Tensor) else step).reshape(-1)
    if arr.size != 1 or not np.isfinite(arr[0]) or arr[0] < 0:
        raise ValueError(f"{cls}.set_states: step_counter must be one number >= 0, got {step!r}")
    return int(arr[0])


def _singa_slot_arrays(cls: str, states: Mapping, singa_slots: dict, by_key: dict) -> dict:
    """``{param name: {slot: host array}}`` from SINGA's slot dicts, shapes checked
    against the parameters already known (``by_key``)."""
    slots: dict[Any, dict[str, Any]] = {}
    for singa_name, slot in singa_slots.items():
        given = states.get(singa_name, {})
        if not isinstance(given, Mapping):
            raise ValueError(f"{cls}.set_states: {singa_name!r} must be a dict of name -> tensor")
        for key, v in given.items():
            arr = _host(v.data if isinstance(v, Tensor) else v)
            t = by_key.get(key)
            if t is not None and arr.shape != t.shape:
                raise ValueError(
                    f"{cls}.set_states: {singa_name}[{key!r}] has shape {arr.shape}, "
                    f"the parameter has {t.shape}"
                )
            slots.setdefault(key, {})[slot] = arr
    return slots


def _count(v: Any) -> bool:
    """An int >= 0 (not a bool)."""
    return isinstance(v, int | np.integer) and not isinstance(v, bool) and bool(v >= 0)


def _check_header(cls: str, states: Mapping) -> list[str]:
    """Problems with the optimizer type, the step count and the learning rate."""
    problems = []
    if states.get("type") != cls:
        problems.append(f"optimizer type {states.get('type')!r} does not match {cls!r}")
    step = states.get("step")
    if not _count(step):
        problems.append(f"step must be an int >= 0, got {step!r}")
    lr = states.get("lr")
    if lr is not None and not (_number(lr) and lr >= 0):
        problems.append(f"lr must be None or a number >= 0, got {lr!r}")
    return problems


def _check_param_steps(states: Mapping, names: Mapping[str, Tensor]) -> tuple[Mapping, list[str]]:
    """The per-parameter step counts and the problems with them."""
    psteps = states.get("param_steps")
    if not isinstance(psteps, Mapping):
        return {}, ["param_steps is missing or not a dict"] + [f"missing parameter: {n}" for n in names]
    problems = []
    for n, v in psteps.items():
        if n not in names:
            problems.append(f"unknown parameter: {n}")
        elif not _count(v):
            problems.append(f"param_steps[{n!r}] must be an int >= 0, got {v!r}")
    problems += [f"missing parameter: {n}" for n in names if n not in psteps]
    return psteps, problems


def _check_slots(
    cls: str, states: Mapping, names: Mapping[str, Tensor], slot_names: tuple
) -> tuple[Mapping, list[str]]:
    """The slot arrays and the problems with them (names, shapes, dtypes)."""
    slots = states.get("slots")
    if not isinstance(slots, Mapping):
        return {}, ["slots is missing or not a dict"]
    problems = []
    for key, v in slots.items():
        pname, _, sname = str(key).rpartition("/")
        if pname not in names:
            problems.append(f"slot {key}: unknown parameter {pname!r}")
        elif sname not in slot_names:
            problems.append(f"slot {key}: {cls} has no slot {sname!r} (it has {list(slot_names)})")
        elif not hasattr(v, "shape") or not hasattr(v, "dtype"):
            problems.append(f"slot {key}: expected an array, got {type(v).__name__}")
        else:
            t = names[pname]
            if tuple(v.shape) != t.shape or np.dtype(v.dtype) != t.dtype:
                problems.append(
                    f"slot {key}: expected {t.shape} {t.dtype}, found {tuple(v.shape)} {np.dtype(v.dtype)}"
                )
    return slots, problems


def _device_slots(slots: Mapping, names: Mapping[str, Tensor]) -> dict[Tensor, dict[str, Any]]:
    """Copies of validated slot arrays on their parameters' devices, by parameter."""
    out: dict[Tensor, dict[str, Any]] = {}
    for key, v in slots.items():
        pname, _, sname = str(key).rpartition("/")
        t = names[pname]
        xp = t.device.xp
        arr = xp.array(v.get() if xp is np and hasattr(v, "get") and not isinstance(v, np.ndarray) else v)
        out.setdefault(t, {})[sname] = arr.astype(t.dtype, copy=False)
    return out
