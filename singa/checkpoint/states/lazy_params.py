"""Loading into layers whose parameters do not exist yet.

Layers create their parameters on their first call (``Layer.initialize``). When a
checkpoint is loaded before that (before ``compile``), the entries that belong to
a not-yet-initialized layer are held by a :class:`PendingLoad` attached to the root
layer (attribute ``_checkpoint_pending``) and applied by the layer's load hook
(:meth:`~singa.layer.base.Layer.set_initialize_hook`, removed when it fires), so right
after the parameters are created, and before the layer's first ``forward``, the
held values are checked (names, shapes, dtypes) and copied in place. While the
parameters are created the device random generators are saved and restored, so
parameter initialization does not consume the random stream restored from the
checkpoint. The optimizer states are applied when the last held entry is.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from singa import device as _device
from singa.checkpoint.errors import CheckpointError, CheckpointWarning
from singa.tensor import Tensor

_ATTR = "_checkpoint_pending"


def uninitialized(layer: Any) -> bool:
    """True for a layer that has not run its first call and that creates (or
    adapts) its parameters then (:attr:`~singa.layer.base.Layer.awaiting_first_call`)."""
    return layer.awaiting_first_call


def deepest_owner(name: str, owners: dict[str, Any]) -> str | None:
    """The longest prefix ``p`` in ``owners`` with ``name`` under ``p.`` ('' = root)."""
    best = None
    for p in owners:
        if (p == "" or name.startswith(p + ".")) and (best is None or len(p) > len(best)):
            best = p
    return best


def describe(t: Any) -> str:
    return f"{tuple(t.shape)} {np.dtype(t.dtype)}"


class PendingLoad:
    """Checkpoint entries waiting for their layers to create their parameters."""

    def __init__(
        self,
        root: Any,
        label: str,
        strict: bool,
        entries: dict[str, np.ndarray],
        finish: Callable[[], None] | None,
        protect_rng: list,
        report: Any,
    ):
        self.root = root
        self.label = label
        self.strict = strict
        self.entries = entries
        self.finish_cb = finish
        self.protect_rng = protect_rng  # devices whose generator was restored
        self.report = report
        self.hooked: dict[int, Any] = {}
        self.optimizer_states: dict | None = None  # applied by ``finish`` once nothing is held
        self.bad: set[str] = set()  # names found mismatched when their layer was created
        self.known: set[str] = set(root.get_states())  # states that existed at load time
        self.finished = not entries  # the optimizer states are applied once nothing is held

    # ----- hooks -------------------------------------------------------------------------
    def install(self, layer: Any, prefix: str) -> None:
        if id(layer) in self.hooked:
            return
        pending = self

        def hook(create: Callable[[], None], *args: Any, **kwargs: Any) -> None:
            pending.unhook(layer)
            devs = list(pending.protect_rng)
            for a in list(args) + list(kwargs.values()):
                if isinstance(a, Tensor) and a.device not in devs and pending.protect_rng:
                    devs.append(a.device)
            # a GPU generator can only be reseeded, which would rewind it: leave it alone
            saved = [(dv, dv.get_rng_state()) for dv in devs if not dv.is_gpu]
            try:
                create()
            finally:
                for dv, st in saved:
                    dv.set_rng_state(st)
            pending.created(layer, prefix)

        layer.set_initialize_hook(hook)
        self.hooked[id(layer)] = layer

    def unhook(self, layer: Any) -> None:
        if self.hooked.pop(id(layer), None) is not None:
            layer.set_initialize_hook(None)

    def detach(self) -> None:
        """Remove every hook and detach from the root."""
        for layer in list(self.hooked.values()):
            self.unhook(layer)
        if vars(self.root).get(_ATTR) is self:
            del vars(self.root)[_ATTR]

    # ----- applying --------------------------------------------------------------------------
    def created(self, layer: Any, prefix: str) -> None:
        """``layer`` (at dotted path ``prefix``) has just created its parameters: check
        and copy the held entries below it, report its new states that the file lacks,
        and hook the lazy sublayers it may have created."""
        pre = prefix + "." if prefix else ""
        own = {pre + k: t for k, t in layer.get_states().items()}
        subs = {pre + k: s for k, s in layer.sublayers().items() if uninitialized(s)}
        for p, sub in subs.items():
            self.install(sub, p)
        ready, problems = self._match(own, subs, pre)
        found = any(items for _, items in problems)
        if self.strict and found:
            self.detach()
            lines = [f"  {kind}: {m}" for kind, items in problems for _, m in items]
            raise CheckpointError(
                f"{self.label} does not match {type(layer).__name__} {prefix or '(the model)'} "
                "whose parameters were just created from its first input:\n" + "\n".join(lines)
            )
        for name, t in ready:
            t.copy_from(self.entries.pop(name))
        if found:
            self._skip(problems, prefix)
        self.report.pending = sorted(self.entries)
        self._finish_if_done()

    def _match(self, own: dict, subs: dict, pre: str) -> tuple[list, list]:
        """The held entries under ``pre`` that fit the new states ``own`` (name, Tensor),
        and the problems by kind: states the file lacks, mismatched and unexpected
        entries (entries of lazy sublayers ``subs`` stay held)."""
        ready, mismatched, unexpected = [], [], []
        missing = [
            (n, f"{n} (expected {describe(t)})")
            for n, t in own.items()
            if n not in self.entries and n not in self.known
        ]
        self.known.update(own)
        for name in [n for n in self.entries if n.startswith(pre)]:
            arr = self.entries[name]
            t = own.get(name)
            if t is not None:
                if tuple(arr.shape) == t.shape and arr.dtype == t.dtype:
                    ready.append((name, t))
                else:
                    mismatched.append((name, f"{name}: expected {describe(t)}, found {describe(arr)}"))
            elif deepest_owner(name, subs) is None:  # else held until that sublayer creates it
                unexpected.append((name, f"{name} (found {describe(arr)})"))
        return ready, [("missing", missing), ("mismatched", mismatched), ("unexpected", unexpected)]

    def _skip(self, problems: list, prefix: str) -> None:
        """``strict=False``: drop the problem entries, report them and warn."""
        for kind, items in problems:
            for name, m in items:
                self.entries.pop(name, None)
                getattr(self.report, kind).append(m)
                if kind == "mismatched":
                    self.bad.add(name)
        warnings.warn(
            f"{self.label}: skipped while creating {prefix or 'the model'}: "
            + "; ".join(f"{kind}: {m}" for kind, items in problems for _, m in items),
            CheckpointWarning,
            stacklevel=5,
        )

    def _finish_if_done(self) -> None:
        """Apply the optimizer states once nothing is held; detach once nothing is hooked."""
        if not self.entries and not self.finished:
            self.finished = True
            if self.finish_cb is not None:
                self.finish_cb()
        if not self.hooked:
            self.detach()


def pending_of(layer: Any) -> PendingLoad | None:
    """The pending load attached to ``layer``, if any."""
    return vars(layer).get(_ATTR) if hasattr(layer, "__dict__") else None


def attach(pl: PendingLoad, owners: dict[str, Any]) -> None:
    """Install the hooks of ``pl`` on the lazy layers ``owners`` (dotted path ->
    layer; '' is the root) and attach it to its root."""
    old = pending_of(pl.root)
    if old is not None:
        old.detach()
    for prefix, layer in owners.items():
        pl.install(layer, prefix)
    vars(pl.root)[_ATTR] = pl


def default_devices(layer: Any) -> list:
    """The devices whose generators a layer's parameter creation may draw from."""
    devs = [_device.get_default_device()]
    for t in layer.get_states().values():
        if t.device not in devs:
            devs.append(t.device)
    return devs
