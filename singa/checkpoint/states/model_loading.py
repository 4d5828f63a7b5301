"""Loading: checking a checkpoint's contents against a model, its optimizer and its
random generator, then applying them, all or (``strict=True``) nothing; entries of
lazily created parameters are handed to :mod:`singa.checkpoint.states.lazy_params`."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from singa.checkpoint.errors import CheckpointError, CheckpointWarning
from singa.checkpoint.fileformat.file_reading import INFLATE_MARGIN, Expectation, read_checkpoint
from singa.checkpoint.fileformat.layout import AUX_STATE, MODEL_STATE, OPTIMIZER_STATE, ArrayMeta, Contents
from singa.checkpoint.states import lazy_params
from singa.checkpoint.states.model_saving import states_device
from singa.opt.dist import unwrap_optimizer
from singa.tensor import Tensor

#: optimizer slots a parameter may have (momentum; Adam's two moments; a margin)
SLOTS_PER_PARAM = 4
#: aux arrays a checkpoint may hold beyond what the model expects
MAX_AUX_ARRAYS = 1024


@dataclass
class LoadReport:
    """What a load skipped (``strict=False``) or is still holding.

    Attributes:
        missing: states of the model that the file does not hold (left as they were).
        unexpected: entries of the file that the model does not have.
        mismatched: ``name: expected <shape> <dtype>, found <shape> <dtype>``.
        skipped: optimizer or random-generator states that were not restored, and why.
        pending: entries held until their (lazily created) parameters exist.
    """

    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        """One line per skipped entry."""
        return (
            [f"missing: {m}" for m in self.missing]
            + [f"unexpected: {u}" for u in self.unexpected]
            + [f"mismatched: {m}" for m in self.mismatched]
            + [f"skipped: {s}" for s in self.skipped]
        )

    def __bool__(self) -> bool:
        return bool(self.missing or self.unexpected or self.mismatched or self.skipped)


class AuxStates(dict):
    """The ``aux_states`` dict returned by loading; ``.report`` is the
    :class:`LoadReport` of the load (empty after a complete strict load)."""

    report: LoadReport


def _desc(shape: Any, dtype: Any) -> str:
    return f"{tuple(shape)} {np.dtype(dtype)}"


@dataclass
class _Plan:
    apply: list = field(default_factory=list)  # (Tensor, key), then (Tensor, array) once read
    pending: dict = field(default_factory=dict)  # name -> key, then array (lazy parameters)
    lazy: dict = field(default_factory=dict)  # dotted path -> layer that creates states on first call
    errors: list = field(default_factory=list)  # lines for a strict CheckpointError
    bad: set = field(default_factory=set)  # names of mismatched states
    keep_optimizer: bool = False  # the file's optimizer states are to be restored
    rng: Any = None  # the random state to restore

    def resolve(self, values: dict) -> None:
        """Replace the planned keys by the arrays read."""
        self.apply = [(t, values[key]) for t, key in self.apply]
        self.pending = {name: values[key] for name, key in self.pending.items()}


def _plan_layer(layer: Any, given: dict[str, ArrayMeta], report: LoadReport, plan: _Plan) -> None:
    """Compare the stored model states (shapes and dtypes, no data) with the layer's."""
    own = layer.get_states()
    lazy = {k: s for k, s in layer.sublayers().items() if lazy_params.uninitialized(s)}
    if lazy_params.uninitialized(layer):
        lazy[""] = layer
    plan.lazy = lazy
    for name, t in own.items():
        if name not in given:
            report.missing.append(f"{name} (expected {_desc(t.shape, t.dtype)})")
    for name, arr in given.items():
        t = own.get(name)
        if t is None:
            owner = lazy_params.deepest_owner(name, lazy)
            if owner is None:
                report.unexpected.append(f"{name} (found {_desc(arr.shape, arr.dtype)})")
            else:
                plan.pending[name] = name
        elif tuple(arr.shape) != t.shape or arr.dtype != t.dtype:
            plan.bad.add(name)
            report.mismatched.append(
                f"{name}: expected {_desc(t.shape, t.dtype)}, found {_desc(arr.shape, arr.dtype)}"
            )
        else:
            plan.apply.append((t, name))


def _check_rng(dev: Any, state: Any) -> str | None:
    """Why ``state`` cannot be set on ``dev``'s generator, or None (tried on a copy)."""
    if not isinstance(state, dict) or state.get("device") not in ("cpu", "gpu"):
        return f"not a random generator state: {str(state)[:100]}"
    if dev.is_gpu or state["device"] == "gpu":
        seed = state.get("seed")
        if seed is not None and not (type(seed) is int and seed >= 0):
            return f"invalid random seed {seed!r}"
        return None
    bg = type(dev.rng.bit_generator)
    inner = state.get("state")
    if not isinstance(inner, dict) or inner.get("bit_generator") != bg.__name__:
        got = inner.get("bit_generator") if isinstance(inner, dict) else None
        return f"the file holds a {got!r} generator state, the device uses {bg.__name__}"
    try:
        bg().state = inner
    except (ValueError, TypeError, KeyError, OverflowError) as e:
        return f"invalid {bg.__name__} state ({e})"
    return None


def _optimizer_states(c: Contents) -> dict | None:
    if c.optimizer is None:
        return None
    st = dict(c.optimizer["states"])
    st["slots"] = {m.slot: c.values[k] for k, m in c.arrays.items() if m.state_type == OPTIMIZER_STATE}
    return st


def _filter_optimizer(states: dict, names: Mapping, bad: set) -> tuple[dict, dict, list[str]]:
    """For ``strict=False``: the optimizer states and parameter names restricted to
    the parameters that were loaded and have optimizer states in the file."""
    st = dict(states)
    psteps = st.get("param_steps")
    if not isinstance(psteps, Mapping):
        return st, names, []
    keep = {n for n in names if n in psteps and n not in bad}
    st["param_steps"] = {n: v for n, v in psteps.items() if n in keep}
    st["slots"] = {k: v for k, v in st["slots"].items() if k.rpartition("/")[0] in keep}
    dropped = [f"optimizer state of {n}" for n in list(names) + list(psteps) if n not in keep]
    return st, {n: t for n, t in names.items() if n in keep}, sorted(set(dropped))


def _aux_problems(c: Contents) -> list[str]:
    """Aux entries that cannot be loaded as what they say they are."""
    return [
        f"aux state {k!r} is marked scalar but has shape {m.shape}"
        for k, m in c.arrays.items()
        if m.state_type == AUX_STATE and m.aux_type == "scalar" and m.shape != ()
    ]


def _aux(c: Contents, dev: Any) -> AuxStates:
    """The aux states: arrays (Tensors on ``dev``), scalars and JSON values."""
    aux = AuxStates()
    for k, m in c.arrays.items():
        if m.state_type != AUX_STATE:
            continue
        arr = c.values[k]
        if m.aux_type == "tensor":
            aux[k] = Tensor(arr.shape, dev, arr.dtype, data=arr, requires_grad=False)
        elif m.aux_type == "scalar":
            aux[k] = arr[()]
        else:
            aux[k] = arr
    aux.update(c.aux_values)
    return aux


def _check_optimizer(
    c: Contents, layer: Any, opt: Any, from_model: bool, report: LoadReport, plan: _Plan
) -> bool:
    """Whether the file's optimizer states are to be kept (they are not when the file
    has none or they belong to another optimizer class, a strict error)."""
    if c.optimizer is None:
        if opt is not None and layer is not None and c.format_version >= 1:
            report.skipped.append("optimizer states (the file holds none; the optimizer was left as it was)")
        return False
    if opt is None:
        if from_model:
            report.skipped.append("optimizer states (the model has no optimizer: call set_optimizer first)")
        return True
    cls = c.optimizer["class"]
    if cls != type(opt).__name__:
        msg = f"optimizer: the file holds {cls} states, the optimizer is {type(opt).__name__}"
        plan.errors.append(msg)
        report.skipped.append(msg)
        return False
    return True


def _plan_optimizer(
    c: Contents, layer: Any, opt: Any, params: Mapping | None, strict: bool, report: LoadReport, plan: _Plan
) -> tuple[dict | None, tuple | None]:
    """The optimizer states to restore and, unless there is no optimizer or they wait
    for lazy parameters, ``(optimizer, states, names)`` to apply now."""
    opt_states = _optimizer_states(c)
    if opt is None or plan.pending:
        return opt_states, None
    names = params if params is not None else layer.get_params()
    if not strict:
        opt_states, names, dropped = _filter_optimizer(opt_states, names, plan.bad)
        report.skipped += dropped
    return opt_states, (opt, opt_states, names)


def _plan_rng(c: Contents, dev: Any, report: LoadReport, plan: _Plan) -> None:
    """The random state to restore on ``dev`` (``plan.rng``), if the file has a usable one."""
    if c.rng is None:
        return
    why = _check_rng(dev, c.rng)
    if why is None:
        plan.rng = c.rng
        return
    plan.errors.append(f"random state: {why}")
    report.skipped.append(f"random state: {why}")


def _raise_strict(label: str, target: str, report: LoadReport, plan: _Plan) -> None:
    """With ``strict=True``: one CheckpointError listing every problem, if any."""
    errors = [f"missing: {m}" for m in report.missing]
    errors += [f"unexpected: {u}" for u in report.unexpected]
    errors += [f"mismatched: {m}" for m in report.mismatched]
    errors += plan.errors
    if errors:
        raise CheckpointError(
            f"{label} does not match {target} (nothing was changed):\n" + "\n".join("  " + e for e in errors)
        )


def _apply_optimizer(label: str, strict: bool, opt_now: tuple | None, report: LoadReport) -> Any:
    """Set the optimizer states (the optimizer validates them and changes nothing on
    error); returns its previous states, to restore if a later step fails."""
    if opt_now is None:
        return None
    o, st, names = opt_now
    snapshot = o.get_states(names)
    try:
        o.set_states(st, names)
    except ValueError as e:
        if strict:
            raise CheckpointError(
                f"{label}: the optimizer states do not fit (nothing was changed): {e}"
            ) from None
        report.skipped.append(f"optimizer states ({e})")
        return None
    return snapshot


def _apply(label: str, strict: bool, plan: _Plan, opt_now: tuple | None, report: LoadReport) -> None:
    """Apply the optimizer states, then the model states (copied in place); undo the
    optimizer's if copying fails."""
    snapshot = _apply_optimizer(label, strict, opt_now, report)
    try:
        for t, arr in plan.apply:
            t.copy_from(arr)
    except BaseException:
        if snapshot is not None:
            opt_now[0].set_states(snapshot, opt_now[2])
        raise


def _expectation(layer: Any, params: Mapping | None, check: Callable[[Contents], None]) -> Expectation:
    """What a checkpoint for ``layer`` (or the optimizer of ``params``) may hold: its
    states, optimizer slots of up to ``SLOTS_PER_PARAM`` times each parameter, and a
    margin for aux arrays; no limit from a layer that creates parameters later."""
    states = dict(layer.get_states()) if layer is not None else {}
    ps = dict(params if params is not None else (layer.get_params() if layer is not None else {}))
    lazy = layer is not None and (
        lazy_params.uninitialized(layer)
        or any(lazy_params.uninitialized(s) for s in layer.sublayers().values())
    )
    if lazy:
        return Expectation(check=check)
    nbytes = sum(t.size() * np.dtype(t.dtype).itemsize for t in states.values())
    nbytes += SLOTS_PER_PARAM * sum(t.size() * np.dtype(t.dtype).itemsize for t in ps.values())
    max_arrays = len(states) + SLOTS_PER_PARAM * len(ps) + MAX_AUX_ARRAYS
    return Expectation(nbytes + INFLATE_MARGIN, max_arrays, check)


def load(
    fpath: Any, *, layer: Any, optimizer: Any, params: Mapping | None, strict: bool, with_rng: bool
) -> AuxStates:
    """Load ``fpath`` into ``layer`` (or None), ``optimizer`` (an optimizer, None, or
    "model" for the layer's own) over ``params`` (or the layer's parameters) and with
    ``with_rng`` the device's random generator; returns the aux states. Names, shapes
    and dtypes are compared before any array data is read."""
    report = LoadReport()
    plan = _Plan()
    target = type(layer).__name__ if layer is not None else type(optimizer).__name__
    dev = states_device(layer, params)
    opt = getattr(layer, "optimizer", None) if optimizer == "model" else optimizer
    opt = unwrap_optimizer(opt)  # a DistOpt restores the optimizer it wraps

    def check(c: Contents) -> None:
        label = repr(c.path)
        if layer is not None:
            given = {k: m for k, m in c.arrays.items() if m.state_type == MODEL_STATE}
            _plan_layer(layer, given, report, plan)
        plan.keep_optimizer = _check_optimizer(c, layer, opt, optimizer == "model", report, plan)
        if with_rng:
            _plan_rng(c, dev, report, plan)
        aux_problems = _aux_problems(c)
        if aux_problems:
            raise CheckpointError(f"{label}: " + "; ".join(aux_problems))
        if strict:
            _raise_strict(label, target, report, plan)

    c = read_checkpoint(fpath, expect=_expectation(layer, params, check))
    label = repr(c.path)
    plan.resolve(c.values)
    opt_states, opt_now = None, None
    if plan.keep_optimizer:
        opt_states, opt_now = _plan_optimizer(c, layer, opt, params, strict, report, plan)
    aux = _aux(c, dev)
    _apply(label, strict, plan, opt_now, report)
    if plan.rng is not None:
        dev.set_rng_state(plan.rng)
    if plan.pending or plan.lazy:
        _defer(
            layer,
            plan,
            label,
            strict,
            report,
            opt if opt_states is not None else None,
            opt_states,
            plan.rng,
            dev,
        )
    if not strict and report:
        warnings.warn(
            f"{label}: loaded with skips: " + "; ".join(report.problems()), CheckpointWarning, stacklevel=3
        )
    aux.report = report
    return aux


def _defer(
    layer: Any,
    plan: _Plan,
    label: str,
    strict: bool,
    report: LoadReport,
    opt: Any,
    opt_states: dict | None,
    rng: Any,
    dev: Any,
) -> None:
    """Hold the entries of lazily created parameters (and the optimizer states until
    they are all applied) and watch the lazy layers for states the file lacks."""
    report.pending = sorted(plan.pending)

    def finish() -> None:
        pl.optimizer_states = None
        o = getattr(layer, "optimizer", None) if opt is not None else None
        if o is None or opt_states is None:
            return
        names, st = layer.get_params(), opt_states
        if not strict:
            st, names, dropped = _filter_optimizer(opt_states, names, plan.bad | pl.bad)
            report.skipped += dropped
        try:
            o.set_states(st, names)
        except ValueError as e:
            if strict:
                raise CheckpointError(f"{label}: the optimizer states do not fit: {e}") from None
            report.skipped.append(f"optimizer states ({e})")
            warnings.warn(f"{label}: optimizer states skipped: {e}", CheckpointWarning, stacklevel=5)

    devs = lazy_params.default_devices(layer) if rng is not None else []
    if rng is not None and dev not in devs:
        devs.append(dev)
    pl = lazy_params.PendingLoad(layer, label, strict, dict(plan.pending), finish, devs, report)
    pl.optimizer_states = opt_states if plan.pending else None
    lazy_params.attach(pl, plan.lazy)


def load_arrays(
    layer: Any,
    arrays: Mapping[str, np.ndarray],
    *,
    label: str,
    strict: bool,
    hint: Callable[[LoadReport], str] | None = None,
) -> LoadReport:
    """Load named model states (``arrays``, from a file named by ``label``) into
    ``layer`` with the checks of :func:`load`: names, shapes and dtypes are compared
    first; with ``strict=True`` any problem raises :class:`CheckpointError` (with
    ``hint(report)`` appended) and nothing changes. Lazily created states are filled
    in when they are created."""
    report, plan = LoadReport(), _Plan()
    given = {k: ArrayMeta(k, MODEL_STATE, tuple(a.shape), np.dtype(a.dtype), None) for k, a in arrays.items()}
    _plan_layer(layer, given, report, plan)
    if strict:
        try:
            _raise_strict(label, type(layer).__name__, report, plan)
        except CheckpointError as e:
            extra = hint(report) if hint is not None else ""
            raise CheckpointError(f"{e}\n{extra}" if extra else str(e)) from None
    plan.resolve(dict(arrays))
    _apply(label, strict, plan, None, report)
    if plan.pending or plan.lazy:
        _defer(layer, plan, label, strict, report, None, None, None, states_device(layer))
    if not strict and report:
        warnings.warn(
            f"{label}: loaded with skips: " + "; ".join(report.problems()), CheckpointWarning, stacklevel=3
        )
    return report
