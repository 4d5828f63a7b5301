"""Gradient accumulation: one optimizer update from the gradients of several
batches (``Model.fit(..., accumulate=k)``).

:class:`GradientAccumulator` hands the model a stand-in for its optimizer for each
micro-batch: :meth:`~GradientAccumulator.phase` returns the *collecting* stand-in
(backward, then add the gradients into per-parameter buffers) or the *applying* one
for the k-th batch (add, divide the sums by the number of batches, update every
parameter through the real optimizer, zero the buffers, advance the schedule). The
model's own ``train_one_batch`` calls ``self.optimizer(loss)`` as usual and reaches
the stand-in. Every array operation is reported to the device's recorder, so graph
mode traces each stand-in once (the model keys its traces by the optimizer object)
and replays it.

With batches of equal size and a mean loss, k accumulated batches give the update of
one batch k times larger (up to float32 rounding of the sums), for models without
batch statistics (BatchNorm normalises each micro-batch by its own statistics).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from singa.autograd import engine
from singa.opt.dist import DistOpt
from singa.tensor import Tensor

__all__ = ["GradientAccumulator", "ACCUMULATOR_KEY"]

#: the aux-state key of an accumulation in progress (``{"k": ..., "pending": ...}``);
#: the partial sums go under ``ACCUMULATOR_KEY + "." + parameter name``
ACCUMULATOR_KEY = "singa_accumulate"


def _add_into(buf: Any, g: Any) -> None:
    buf += g


def _zero(buf: Any) -> None:
    buf.fill(0)


class _Divide:
    """``arr / n`` as a new array (a recordable kernel)."""

    def __init__(self, n: int):
        self.n = n

    def __call__(self, arr: Any) -> Any:
        return arr / arr.dtype.type(self.n)

    def __repr__(self) -> str:
        return f"divide_by_{self.n}"


def _run(dev: Any, fn: Any, ins: list) -> Any:
    """``fn(*ins)`` reported to ``dev``'s recorder (if any)."""
    out = fn(*ins)
    rec = dev.recorder
    if rec is not None:
        rec.record(fn, ins, () if out is None else (out,))
    return out


class _Phase:
    """The stand-in optimizer of one micro-batch; other attributes are the real
    optimizer's."""

    def __init__(self, owner: GradientAccumulator, divide_by: int | None):
        self.owner = owner
        self.divide_by = divide_by

    def __getattr__(self, name: str) -> Any:
        return getattr(self.owner.optimizer, name)

    def backward_and_update(self, loss: Tensor, dy: Any = None) -> None:
        """Back-propagate ``loss`` and add the gradients into the buffers; the
        applying phase then updates the parameters from their mean."""
        owner = self.owner
        dev = loss.device
        for p, g in engine.backward(loss, dy, retain_graph=False):
            garr = g.data if isinstance(g, Tensor) else g
            _run(dev, _add_into, [owner.buffer(p, garr), garr])
        if self.divide_by is None:
            return
        divide = _Divide(self.divide_by)
        opt = owner.optimizer
        for p, buf in owner.buffers.items():
            mean = _run(dev, divide, [buf])
            _run(dev, _zero, [buf])
            opt.update(p, mean)
        opt.step(dev)

    __call__ = backward_and_update


def _in_progress(state: Any) -> tuple[int, int]:
    """``(pending, k)`` of a checkpoint's accumulation entry ((0, 0) without one)."""
    if state is None:
        return 0, 0
    ok = isinstance(state, Mapping) and all(
        type(state.get(key)) is int and state[key] >= 0 for key in ("k", "pending")
    )
    if not ok or state["pending"] >= max(state["k"], 1):
        raise ValueError(
            f"aux state {ACCUMULATOR_KEY!r} must be {{'k': int, 'pending': int < k}}, got {state!r}"
        )
    return state["pending"], state["k"]


class GradientAccumulator:
    """Accumulate the gradients of ``k`` batches into one update of ``optimizer``.

    Raises ValueError for optimizers whose step does more than update each parameter
    (data-parallel :class:`~singa.opt.DistOpt`, a loss scaler, gradient clipping).
    ``named_params`` (the model's ``get_params``) names the sums for checkpoints:
    :meth:`checkpoint_aux` / :meth:`load_aux` carry an accumulation in progress over a
    mid-epoch save and resume.
    """

    def __init__(
        self, optimizer: Any, k: int, named_params: Callable[[], Mapping[str, Tensor]] | None = None
    ):
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"accumulate must be an int >= 1, got {k!r}")
        if isinstance(optimizer, DistOpt):
            raise ValueError("accumulate > 1 does not support DistOpt (data-parallel) optimizers yet")
        if getattr(optimizer, "loss_scaler", None) is not None:
            raise ValueError("accumulate > 1 does not support mixed precision (a loss scaler) yet")
        if getattr(optimizer, "clip_norm", None) is not None:
            raise ValueError("accumulate > 1 does not support clip_norm yet")
        self.optimizer = optimizer
        self.k = k
        self.named_params = named_params
        self._restored: dict[str, np.ndarray] = {}
        self.pending = 0
        self.buffers: dict[Tensor, Any] = {}
        self._collect = _Phase(self, None)
        self._apply: dict[int, _Phase] = {}

    def buffer(self, param: Tensor, like: Any = None) -> Any:
        """The (zeroed at creation) sum buffer of ``param``."""
        buf = self.buffers.get(param)
        if buf is None:
            buf = self.buffers[param] = param.data.copy()
            buf.fill(0)
            if self._restored:  # a resumed update in progress (load_aux)
                self._restore_into(param, buf)
        return buf

    def phase(self, last_of_epoch: bool = False) -> _Phase:
        """The stand-in for the next batch: applying on the k-th one (or on the last of
        an epoch, dividing by the batches accumulated), collecting otherwise. Counts
        the batch (a graph replay runs no Python of the stand-in, so the count is kept
        here)."""
        n = self.pending + 1
        if n < self.k and not last_of_epoch:
            self.pending = n
            return self._collect
        self.pending = 0
        if n not in self._apply:
            self._apply[n] = _Phase(self, n)
        return self._apply[n]

    def checkpoint_aux(self) -> dict:
        """Aux states for a checkpoint: how many batches of the update in progress are
        summed, and (when any) their sums by parameter name."""
        aux: dict = {ACCUMULATOR_KEY: {"k": self.k, "pending": self.pending}}
        if self.pending:
            names = {id(t): n for n, t in self._params().items()}
            for p, buf in self.buffers.items():
                aux[f"{ACCUMULATOR_KEY}.{names[id(p)]}"] = buf.copy()
        return aux

    def load_aux(self, aux: Mapping) -> None:
        """Continue the update in progress stored by :meth:`checkpoint_aux` in a
        checkpoint's aux states (what ``load_states`` returned; nothing when it holds
        none). The sums go into the buffers now, or when the parameters exist (a model
        built on its first batch). Raises ValueError, before changing anything, for a
        checkpoint summing another number of batches per update."""
        pending, k = _in_progress(aux.get(ACCUMULATOR_KEY))
        if not pending:
            return
        if k != self.k:
            raise ValueError(
                f"the checkpoint is {pending} batches into an update of {k} batches; "
                f"this run accumulates {self.k}: resume with the same accumulate"
            )
        prefix = ACCUMULATOR_KEY + "."
        self._restored = {
            k[len(prefix) :]: np.asarray(v.to_numpy() if isinstance(v, Tensor) else v)
            for k, v in aux.items()
            if k.startswith(prefix)
        }
        self.pending = pending
        for name, p in self._params().items():
            if name in self._restored:  # parameters that exist already (others: on creation)
                self.buffer(p)

    def _restore_into(self, param: Tensor, buf: Any) -> None:
        names = {id(t): n for n, t in self._params().items()}
        arr = self._restored.pop(names.get(id(param), ""), None)
        if arr is None:
            return
        if arr.shape != tuple(param.shape):
            raise ValueError(f"accumulated sum: shape {arr.shape}, its parameter's {param.shape}")
        buf[...] = param.device.xp.asarray(arr, dtype=buf.dtype)

    def _params(self) -> Mapping[str, Tensor]:
        if self.named_params is None:
            raise ValueError("GradientAccumulator: no named_params to name the sums by")
        return self.named_params()
