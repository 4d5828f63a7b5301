"""Checkpoints: a model's states, its optimizer, its random generator and your own
auxiliary states in one zip file, saved atomically and loaded exactly.

``Model.save_states(fpath, aux_states=None)`` and ``Model.load_states(fpath,
strict=True)`` call :func:`save_model` and :func:`load_model`. The file is a zip
holding ``tensor_dict.npz`` and ``states_attr.json`` laid out as Apache SINGA's
``save_states`` writes them (so its checkpoints load here), plus
``extra_states.json`` (JSON aux states, optimizer scalars, random state) and
``metadata.json`` (format version, singa version, creation time, SHA-256 of every
array). The layout is described in ``docs/checkpoint-format.md``.

Guarantees:

- saving writes a temporary file next to the target, fsyncs it and renames it
  over the target: a crash leaves the old file or the new one, never a broken one;
- loading reads and checks everything (zip structure, checksums, format version,
  names, shapes, dtypes of the model, the optimizer and the random state) before
  changing anything; any problem raises :class:`CheckpointError` (a ``ValueError``)
  naming the file and every offending entry, and leaves everything as it was;
- no pickle: arrays are plain ``.npy`` members, object arrays are rejected, members
  are read in memory and never extracted;
- exact resume: parameters, buffers, optimizer slots and step counts, the
  scheduler position and the device's random generator are restored bit for bit.

Example::

    model.set_optimizer(opt.SGD(0.1, momentum=0.9))
    model.compile([x], is_train=True, use_graph=True)
    ...
    model.save_states("ckpt.zip", aux_states={"epoch": epoch})
    # later, maybe in another process or on another device:
    aux = model.load_states("ckpt.zip")
    epoch = aux["epoch"]
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from singa.model import checkpoint_lazy as _lazy
from singa.model import checkpoint_save as _saving
from singa.model.checkpoint_format import (
    AUX_STATE,
    FORMAT_VERSION,
    MODEL_STATE,
    OPTIMIZER_STATE,
    Contents,
    read_checkpoint,
)
from singa.model.checkpoint_io import CheckpointError
from singa.model.checkpoint_lazy import CheckpointWarning
from singa.opt.dist import unwrap_optimizer
from singa.tensor import Tensor

__all__ = [
    "CheckpointError",
    "CheckpointWarning",
    "LoadReport",
    "AuxStates",
    "ArrayInfo",
    "CheckpointInfo",
    "FORMAT_VERSION",
    "save_model",
    "load_model",
    "save_layer",
    "load_layer",
    "save_optimizer",
    "load_optimizer",
    "read",
    "read_arrays",
]


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


@dataclass(frozen=True)
class ArrayInfo:
    """One stored array: ``kind`` is "model", "aux" or "optimizer"."""

    key: str
    kind: str
    shape: tuple
    dtype: np.dtype
    nbytes: int
    sha256: str | None


@dataclass
class CheckpointInfo:
    """What :func:`read` finds in a checkpoint, without a model."""

    path: str
    format_version: int
    metadata: dict
    arrays: dict[str, ArrayInfo]
    aux_values: dict
    optimizer: dict | None
    rng: dict | None

    @property
    def names(self) -> list[str]:
        """Names of the model states (parameters and buffers)."""
        return [k for k, a in self.arrays.items() if a.kind == "model"]

    @property
    def shapes(self) -> dict[str, tuple]:
        """Shape of every model state."""
        return {k: a.shape for k, a in self.arrays.items() if a.kind == "model"}

    @property
    def dtypes(self) -> dict[str, np.dtype]:
        """Dtype of every model state."""
        return {k: a.dtype for k, a in self.arrays.items() if a.kind == "model"}

    @property
    def nbytes(self) -> int:
        """Total size of the stored arrays."""
        return sum(a.nbytes for a in self.arrays.values())


_KINDS = {MODEL_STATE: "model", AUX_STATE: "aux", OPTIMIZER_STATE: "optimizer"}


# ----- public API ----------------------------------------------------------------------------------
def save_model(model: Any, fpath: Any, aux_states: Mapping | None = None, *, compress: bool = False) -> str:
    """Save ``model``'s states, its optimizer's states (when ``set_optimizer`` was
    used), the random state of its device, and ``aux_states`` to the zip ``fpath``
    (overwritten atomically). ``aux_states`` values may be Tensors, numpy arrays,
    numpy scalars or JSON values (None, bools, ints, floats, strings, lists, dicts
    with string keys). ``compress=True`` deflates the arrays (slower, smaller).
    Returns the path written."""
    opt = getattr(model, "optimizer", None)
    return _saving.save(fpath, model, opt, None, aux_states, True, compress)


def load_model(model: Any, fpath: Any, strict: bool = True) -> AuxStates:
    """Restore what :func:`save_model` wrote (or an Apache SINGA checkpoint) into
    ``model``, its optimizer and its device's random generator; returns the
    ``aux_states`` dict (Tensors on the model's device, arrays, JSON values).

    Everything is validated first; with ``strict=True`` any problem raises
    :class:`CheckpointError` and nothing changes. With ``strict=False`` what matches
    is loaded, the rest is listed in the result's ``.report`` and in a
    :class:`CheckpointWarning`. Values are copied in place into the existing arrays
    (graph traces stay valid). Parameters that a not-yet-compiled model creates
    lazily are filled in when they are created (before their first use)."""
    return _load(fpath, model, "model", None, strict, True)


def save_layer(layer: Any, fpath: Any, aux_states: Mapping | None = None, *, compress: bool = False) -> str:
    """Save a layer's parameters and buffers (no optimizer, no random state)."""
    return _saving.save(fpath, layer, None, None, aux_states, False, compress)


def load_layer(layer: Any, fpath: Any, strict: bool = True) -> AuxStates:
    """Load parameters and buffers into a layer (see :func:`load_model`); optimizer
    and random states in the file are ignored."""
    return _load(fpath, layer, None, None, strict, False)


def save_optimizer(
    optimizer: Any,
    fpath: Any,
    params: Mapping[str, Tensor],
    aux_states: Mapping | None = None,
    *,
    compress: bool = False,
) -> str:
    """Save an optimizer's states on their own; ``params`` names the parameters it
    updates (e.g. ``model.get_params()``)."""
    return _saving.save(fpath, None, optimizer, params, aux_states, False, compress)


def load_optimizer(
    optimizer: Any, fpath: Any, params: Mapping[str, Tensor], strict: bool = True
) -> AuxStates:
    """Restore an optimizer's states saved by :func:`save_optimizer` or
    :func:`save_model`; ``params`` maps names to the parameters it updates."""
    return _load(fpath, None, optimizer, params, strict, False)


def read(fpath: Any, verify: bool = False) -> CheckpointInfo:
    """Describe a checkpoint without a model: names, shapes and dtypes of the stored
    arrays, JSON aux values, optimizer scalars, random state and metadata. The file's
    structure is always checked; ``verify=True`` also reads every array and checks
    its SHA-256. Raises :class:`CheckpointError` for a bad file."""
    c = read_checkpoint(fpath, load=verify)
    arrays = {
        k: ArrayInfo(k, _KINDS[m.state_type], m.shape, m.dtype, m.nbytes, m.sha256)
        for k, m in c.arrays.items()
    }
    return CheckpointInfo(c.path, c.format_version, c.metadata, arrays, c.aux_values, c.optimizer, c.rng)


def read_arrays(fpath: Any) -> dict[str, np.ndarray]:
    """Every stored array by key (model states by name, aux arrays by their key,
    optimizer slots as ``optimizer/<param>/<slot>``), verified against its SHA-256."""
    return dict(read_checkpoint(fpath, load=True).values)


# ----- loading ------------------------------------------------------------------------------------------
def _desc(shape: Any, dtype: Any) -> str:
    return f"{tuple(shape)} {np.dtype(dtype)}"


@dataclass
class _Plan:
    apply: list = field(default_factory=list)  # (Tensor, array)
    pending: dict = field(default_factory=dict)  # name -> array (lazy parameters)
    lazy: dict = field(default_factory=dict)  # dotted path -> layer that creates states on first call
    errors: list = field(default_factory=list)  # lines for a strict CheckpointError
    bad: set = field(default_factory=set)  # names of mismatched states


def _plan_layer(layer: Any, given: dict[str, np.ndarray], report: LoadReport, plan: _Plan) -> None:
    own = layer.get_states()
    lazy = {k: s for k, s in layer.sublayers().items() if _lazy.uninitialized(s)}
    if _lazy.uninitialized(layer):
        lazy[""] = layer
    plan.lazy = lazy
    for name, t in own.items():
        if name not in given:
            report.missing.append(f"{name} (expected {_desc(t.shape, t.dtype)})")
    for name, arr in given.items():
        t = own.get(name)
        if t is None:
            owner = _lazy.deepest_owner(name, lazy)
            if owner is None:
                report.unexpected.append(f"{name} (found {_desc(arr.shape, arr.dtype)})")
            else:
                plan.pending[name] = arr
        elif tuple(arr.shape) != t.shape or arr.dtype != t.dtype:
            plan.bad.add(name)
            report.mismatched.append(
                f"{name}: expected {_desc(t.shape, t.dtype)}, found {_desc(arr.shape, arr.dtype)}"
            )
        else:
            plan.apply.append((t, arr))


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


def _aux(c: Contents, dev: Any, errors: list) -> AuxStates:
    aux = AuxStates()
    for k, m in c.arrays.items():
        if m.state_type != AUX_STATE:
            continue
        arr = c.values[k]
        if m.aux_type == "tensor":
            aux[k] = Tensor(arr.shape, dev, arr.dtype, data=arr, requires_grad=False)
        elif m.aux_type == "scalar":
            if arr.shape != ():
                errors.append(f"aux state {k!r} is marked scalar but has shape {arr.shape}")
                continue
            aux[k] = arr[()]
        else:
            aux[k] = arr
    aux.update(c.aux_values)
    return aux


def _load(
    fpath: Any, layer: Any, optimizer: Any, params: Mapping | None, strict: bool, with_rng: bool
) -> AuxStates:
    c = read_checkpoint(fpath)
    label = repr(c.path)
    report = LoadReport()
    plan = _Plan()
    target = type(layer).__name__ if layer is not None else type(optimizer).__name__
    if layer is not None:
        given = {k: c.values[k] for k, m in c.arrays.items() if m.state_type == MODEL_STATE}
        _plan_layer(layer, given, report, plan)
    dev = _saving.device_of(layer, params)

    # optimizer
    opt = getattr(layer, "optimizer", None) if optimizer == "model" else optimizer
    opt = unwrap_optimizer(opt)  # a DistOpt restores the optimizer it wraps
    opt_states = _optimizer_states(c)
    opt_now = None
    if opt_states is not None and opt is None:
        if optimizer == "model":
            report.skipped.append("optimizer states (the model has no optimizer: call set_optimizer first)")
    elif opt_states is not None:
        cls = c.optimizer["class"]
        if cls != type(opt).__name__:
            msg = f"optimizer: the file holds {cls} states, the optimizer is {type(opt).__name__}"
            plan.errors.append(msg)
            report.skipped.append(msg)
            opt_states = None
        elif not plan.pending:
            names = params if params is not None else layer.get_params()
            if not strict:
                opt_states, names, dropped = _filter_optimizer(opt_states, names, plan.bad)
                report.skipped += dropped
            opt_now = (opt, opt_states, names)
    elif opt is not None and layer is not None and c.format_version >= 1:
        report.skipped.append("optimizer states (the file holds none; the optimizer was left as it was)")

    # random state
    rng = c.rng if with_rng else None
    if rng is not None:
        why = _check_rng(dev, rng)
        if why is not None:
            plan.errors.append(f"random state: {why}")
            report.skipped.append(f"random state: {why}")
            rng = None

    aux_errors: list[str] = []
    aux = _aux(c, dev, aux_errors)
    if aux_errors:
        raise CheckpointError(f"{label}: " + "; ".join(aux_errors))
    if strict:
        errors = [f"missing: {m}" for m in report.missing]
        errors += [f"unexpected: {u}" for u in report.unexpected]
        errors += [f"mismatched: {m}" for m in report.mismatched]
        errors += plan.errors
        if errors:
            raise CheckpointError(
                f"{label} does not match {target} (nothing was changed):\n"
                + "\n".join("  " + e for e in errors)
            )

    # apply: the optimizer first (it validates itself and changes nothing on error)
    snapshot = None
    if opt_now is not None:
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
            snapshot = None
    try:
        for t, arr in plan.apply:
            t.copy_from(arr)
    except BaseException:
        if snapshot is not None:
            opt_now[0].set_states(snapshot, opt_now[2])
        raise
    if rng is not None:
        dev.set_rng_state(rng)
    if plan.pending or plan.lazy:
        _defer(
            layer, plan, label, strict, report, opt if opt_states is not None else None, opt_states, rng, dev
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

    devs = _lazy.default_devices(layer) if rng is not None else []
    if rng is not None and dev not in devs:
        devs.append(dev)
    pl = _lazy.PendingLoad(layer, label, strict, dict(plan.pending), finish, devs, report)
    pl.optimizer_states = opt_states if plan.pending else None
    _lazy.attach(pl, plan.lazy)
