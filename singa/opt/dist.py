"""``DistOpt``: data-parallel training by wrapping an optimizer (SINGA's ``opt.DistOpt``).

Every rank runs the same model on its own shard of each batch; ``DistOpt`` sums the
ranks' gradients with an all-reduce, divides by ``world_size`` (so the update uses
the mean gradient of the global batch) and lets the wrapped optimizer update. The
ranks start from rank 0's parameters and buffers (broadcast by ``Model.compile`` and
``Model.set_optimizer``, as PyTorch's DDP does at construction; without the Model API
by :meth:`DistOpt.broadcast_params` or, failing that, before the first update) and
stay bitwise identical.

Launch with ``mpiexec -n N python train.py`` (CPU arrays go through MPI, GPU arrays
through NCCL), or make an :class:`~singa.parallel.NcclIdHolder` and pass it with
``local_rank`` and ``world_size`` to each child of a multiprocessing launch (GPUs).
A process that no launcher started is a job of one rank.

In graph mode (``Model.compile(..., use_graph=True)``) each collective is recorded as
one kernel of the graph, so replays communicate exactly as eager steps do. Every
collective also takes the communicator's ordering token, an array the graph treats as
a shared resource: replays keep the collectives in the order they were traced, which
is the same on every rank.

The in-place helpers (``all_reduce``, ``fused_all_reduce`` with ``send``, ...) are
SINGA's building blocks for custom loops. In graph mode they are recorded as
in-place effects: use them with ``sequential=True`` graphs.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from singa.autograd import engine as autograd_engine
from singa.opt.base import clip_by_global_norm
from singa.parallel import collectives as coll
from singa.parallel.communicator import Communicator
from singa.tensor import Tensor

__all__ = ["DistOpt", "unwrap_optimizer", "backward_with_option", "DIST_OPTIONS"]

_THRESHOLD = 2097152


def unwrap_optimizer(optimizer: Any) -> Any:
    """The optimizer that holds the states: the one a :class:`DistOpt` wraps, or
    ``optimizer`` itself (checkpoints store and check this one)."""
    return optimizer.opt if isinstance(optimizer, DistOpt) else optimizer


def _array(t: Any) -> Any:
    return t.data if isinstance(t, Tensor) else t


def _contiguous(arr: Any) -> bool:
    return bool(arr.flags.c_contiguous)


class DistOpt:
    """Wrap ``opt`` for data-parallel training over ``world_size`` processes.

    Args:
        opt: the optimizer to wrap (default ``SGD()``).
        nccl_id: a :class:`~singa.parallel.NcclIdHolder` for a multiprocessing launch on
            GPUs; None for ``mpiexec`` (or a single process).
        local_rank: this process's GPU (multiprocessing launch).
        world_size: the number of processes (multiprocessing launch).
        buffSize: SINGA's communication buffer size in elements (kept for the API).
        communicator: an existing :class:`~singa.parallel.Communicator` to use instead
            of making one (the ranks are then its ranks).

    Attributes:
        world_size: the number of processes of the job.
        local_rank: the rank among the processes of this machine (pick the GPU with it).
        global_rank: the rank in the job; rank 0 usually prints and saves.
        opt: the wrapped optimizer.
        communicator: the :class:`~singa.parallel.Communicator`.
    """

    def __init__(
        self,
        opt: Any = None,
        nccl_id: Any = None,
        local_rank: int | None = None,
        world_size: int | None = None,
        buffSize: int = 4194304,
        communicator: Communicator | None = None,
    ):
        if opt is None:
            from singa.opt.optimizers import SGD

            opt = SGD()
        if isinstance(opt, DistOpt):
            raise TypeError("DistOpt: the optimizer is already a DistOpt")
        self.opt = opt
        if communicator is None:
            communicator = Communicator(nccl_id, local_rank, world_size, buffSize)
        self.communicator = communicator
        self.world_size = self.communicator.world_size
        self.local_rank = self.communicator.local_rank
        self.global_rank = self.communicator.global_rank
        self._tokens: dict[Any, Any] = {}
        self._queued: list = []
        self._synced = self.world_size == 1
        self.partial = 0
        self._partitions: list[list[int]] = []
        self.gradAccumulation: list = []
        self.sparsInit = False

    # ----- the wrapped optimizer --------------------------------------------------------
    @property
    def lr(self) -> Any:
        """The wrapped optimizer's learning rate (number or schedule)."""
        return self.opt.lr

    @lr.setter
    def lr(self, value: Any) -> None:
        self.opt.lr = value

    @property
    def loss_scaler(self) -> Any:
        """The wrapped optimizer's :class:`~singa.opt.LossScaler` (``precision="mixed"``
        sets one), kept there so that its state is saved with the optimizer's."""
        return self.opt.loss_scaler

    @loss_scaler.setter
    def loss_scaler(self, scaler: Any) -> None:
        self.opt.loss_scaler = scaler

    @property
    def step_counter(self) -> Any:
        """The wrapped optimizer's completed steps (SINGA's one-element Tensor)."""
        return self.opt.step_counter

    @property
    def steps(self) -> int:
        """The wrapped optimizer's completed steps, an int."""
        return self.opt.steps

    def get_lr(self) -> float:
        """The learning rate of the current step."""
        return self.opt.get_lr()

    def step(self, dev: Any = None) -> None:
        """Advance the wrapped optimizer's step (and schedule)."""
        self.opt.step(dev)

    def get_states(self, names: Any) -> dict:
        """The wrapped optimizer's states (checkpoints are those of a single process)."""
        return self.opt.get_states(names)

    def set_states(self, states: Any, names: Any) -> None:
        """Restore the wrapped optimizer's states."""
        self.opt.set_states(states, names)

    # ----- recording ----------------------------------------------------------------------
    def _token(self, xp: Any) -> Any:
        token = self._tokens.get(xp)
        if token is None:
            token = self._tokens[xp] = xp.zeros(1, dtype=np.float32)
        return token

    def _run(self, dev: Any, fn: Any, arrays: list, effect: bool = False) -> Any:
        """``fn(token, *arrays)``, recorded as one kernel while ``dev`` is traced (an
        in-place effect with no outputs when ``effect``)."""
        ins = [self._token(dev.xp), *arrays]
        result = fn(*ins)
        rec = dev.recorder
        if rec is not None:
            rec.record(fn, ins, () if effect else result)
        return result

    def _engine(self, arr: Any) -> Any:
        return self.communicator.engine_for(arr)

    # ----- SINGA's building blocks ------------------------------------------------------------
    def update(self, param: Tensor, grad: Any) -> None:
        """Update ``param`` from a summed gradient: divide by ``world_size``, then let
        the wrapped optimizer update (SINGA's ``DistOpt.update``)."""
        g = _array(grad)
        scaled = self._run(param.device, functools.partial(_scaled, 1.0 / self.world_size), [g])
        self.opt.update(param, scaled[0])

    def all_reduce(self, tensor: Any) -> None:
        """Sum a tensor (or array) over the ranks, in place."""
        arr = _array(tensor)
        self._run(_device_of(tensor), functools.partial(_sum_into, self._engine(arr)), [arr], effect=True)

    def fused_all_reduce(self, tensor: list, send: bool = True) -> None:
        """Sum a list of tensors over the ranks in place, in one message. With
        ``send=False`` the tensors are only queued; the next call with ``send=True``
        sends the queue (or, if nothing is queued, the given tensors)."""
        arrays = [_array(t) for t in tensor]
        if not send:
            self._queued.extend(arrays)
            return
        arrays, self._queued = (self._queued or arrays), []
        if arrays:
            fn = functools.partial(_sum_into, self._engine(arrays[0]))
            self._run(_device_of(tensor[0]), fn, arrays, effect=True)

    def all_reduce_half(self, tensor: Any) -> None:
        """Sum a float32 tensor over the ranks in place, sent as float16."""
        arr = _array(tensor)
        self._run(_device_of(tensor), functools.partial(_half_into, self._engine(arr)), [arr], effect=True)

    def fused_all_reduce_half(self, tensor: list, send: bool = True) -> None:
        """:meth:`fused_all_reduce` with float16 on the wire."""
        arrays = [_array(t) for t in tensor]
        if not send:
            self._queued.extend(arrays)
            return
        arrays, self._queued = (self._queued or arrays), []
        if arrays:
            fn = functools.partial(_half_into, self._engine(arrays[0]))
            self._run(_device_of(tensor[0]), fn, arrays, effect=True)

    def sparsification(self, tensor: Any, accumulation: Any, spars: float, topK: bool) -> None:
        """Replace a tensor, in place, by the ranks' sum of its significant elements
        (``topK``: the fraction ``spars`` largest by absolute value; else those with
        absolute value >= ``spars``). ``accumulation`` (or None) keeps what was not
        sent and adds it to the next call's tensor."""
        self.fused_sparsification([tensor], accumulation, spars, topK)

    def fused_sparsification(self, tensor: list, accumulation: Any, spars: float, topK: bool) -> None:
        """:meth:`sparsification` of a list of tensors in one message."""
        arrays = [_array(t) for t in tensor]
        acc = None if accumulation is None else _array(accumulation)
        fn = functools.partial(_sparse_into, self._engine(arrays[0]), float(spars), bool(topK))
        self._run(_device_of(tensor[0]), fn, [acc, *arrays], effect=True)

    def wait(self) -> None:
        """Block until queued communication has finished (GPU streams)."""
        self.communicator.wait()

    def all_reduce_any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is True on any rank (what
        :class:`~singa.opt.LossScaler` asks, so that all ranks skip a step together)."""
        return self.communicator.agree(flag)

    # ----- training steps -------------------------------------------------------------------------
    def __call__(self, loss: Tensor) -> None:
        """``backward_and_update(loss)``."""
        self.backward_and_update(loss)

    def backward_and_update(self, loss: Tensor, threshold: int = _THRESHOLD) -> None:
        """Back-propagate, average the gradients over the ranks (tensors of at most
        ``threshold`` elements fused into messages of about that size) and update.

        With a ``loss_scaler`` the scaler runs the step on the ranks' mean of the
        scaled gradients; its inf/NaN check is agreed by all ranks, so they skip a
        step (and back off the scale) together."""
        scaler = self.opt.loss_scaler
        if scaler is None:
            self._reduced_update(loss, threshold, functools.partial(_mean_of, self))
            return
        reduce = functools.partial(self._synced_mean, threshold)
        scaler.backward_and_update(self.opt, loss, reduce_grads=reduce, any_rank=self.all_reduce_any)

    def _synced_mean(self, threshold: int, dev: Any, params: list, grads: list) -> list:
        """The ranks' mean of ``grads`` (fused as in :meth:`backward_and_update`),
        after the first-update broadcast of ``params``."""
        self._sync_params(dev, params)
        averaged: list = [None] * len(grads)
        for grp in coll.fusion_groups([g.size for g in grads], threshold):
            for i, out in zip(grp, _mean_of(self, dev, None, [grads[i] for i in grp])):
                averaged[i] = out
        return averaged

    def _no_scaler(self, variant: str) -> None:
        if self.opt.loss_scaler is not None:
            raise NotImplementedError(
                f"DistOpt.{variant}: loss scaling (precision='mixed') works with the plain "
                "all-reduce only (dist_option='plain'); use precision 'float32' or 'float16' "
                "with this variant"
            )

    def backward_and_update_half(
        self, loss: Tensor, threshold: int = _THRESHOLD, clipping: bool = False, clip_Value: float = 100
    ) -> None:
        """:meth:`backward_and_update` with float16 on the wire (float32 gradients and
        update); with ``clipping`` each gradient is first clipped to ``[-clip_Value,
        clip_Value]``."""
        self._no_scaler("backward_and_update_half")
        clip = float(clip_Value) if clipping else None
        self._reduced_update(loss, threshold, functools.partial(_half_mean_of, self, clip))

    def backward_and_sparse_update(
        self,
        loss: Tensor,
        threshold: int = _THRESHOLD,
        spars: float = 0.05,
        topK: bool = False,
        corr: bool = True,
    ) -> None:
        """:meth:`backward_and_update` sending only significant gradient elements
        (see :meth:`sparsification`); with ``corr`` each rank keeps what it did not
        send and adds it to its next gradient."""
        self._no_scaler("backward_and_sparse_update")
        self._reduced_update(
            loss, threshold, functools.partial(_sparse_mean_of, self, float(spars), bool(topK)), corr
        )

    def backward_and_partial_update(self, loss: Tensor, threshold: int = _THRESHOLD) -> None:
        """Update every parameter from the local gradient, then average one partition
        of the parameters over the ranks (partitions as in the fused all-reduce, taken
        in turn: after a full cycle every parameter was averaged once)."""
        self._no_scaler("backward_and_partial_update")
        pairs = list(autograd_engine.backward(loss, retain_graph=False))
        if not pairs:
            self.opt.step(loss.device)
            return
        dev = loss.device
        self._sync_params(dev, [p for p, _ in pairs])
        for p, g in pairs:
            self.opt.update(p, g)
        self._partitions = coll.fusion_groups([p.size() for p, _ in pairs], threshold)
        params = [p.data for p, _ in pairs]
        self._run(
            dev, functools.partial(_partial_average, self, self._engine(params[0])), params, effect=True
        )
        self.opt.step(dev)

    # ----- the shared path of the all-reduce variants ---------------------------------------------
    def _reduced_update(self, loss: Tensor, threshold: int, reduce: Any, corr: bool = False) -> None:
        pairs = list(autograd_engine.backward(loss, retain_graph=False))
        dev = loss.device
        if pairs:
            self._sync_params(dev, [p for p, _ in pairs])
            grads = [g.data for _, g in pairs]
            groups = coll.fusion_groups([g.size for g in grads], threshold)
            if corr and not self.sparsInit:
                xp = dev.xp
                self.gradAccumulation = [
                    xp.zeros(sum(grads[i].size for i in grp), np.float32) for grp in groups
                ]
            averaged: list = [None] * len(grads)
            for k, grp in enumerate(groups):
                acc = self.gradAccumulation[k] if corr else None
                outs = reduce(dev, acc, [grads[i] for i in grp])
                for i, out in zip(grp, outs):
                    averaged[i] = out
            if self.opt.clip_norm is not None:
                averaged = list(self._run(dev, functools.partial(_clip, self.opt), averaged))
            for (p, _), g in zip(pairs, averaged):
                self.opt.update(p, g)
            self.sparsInit = self.sparsInit or corr
        self.opt.step(dev)

    def broadcast_params(self, tensors: Any) -> None:
        """Give every rank rank 0's values of ``tensors`` (a list or dict of Tensors:
        parameters and buffers), in place; a collective, so every rank calls it at the
        same point. ``Model.compile`` and ``Model.set_optimizer`` call it with the
        model's states; in a loop without the Model API call it once before training
        (or seed every rank alike), else the first update is the only sync and its
        gradients come from different parameters."""
        tensors = list(tensors.values()) if isinstance(tensors, dict) else list(tensors)
        self._synced = True
        if self.world_size == 1 or not tensors:
            return
        dev = tensors[0].device
        arrays = [t.data for t in tensors]
        fn = functools.partial(_broadcast_into, self._engine(arrays[0]))
        rec, dev.recorder = dev.recorder, None  # set-up, never part of a replay
        try:
            fn(self._token(dev.xp), *arrays)
        finally:
            dev.recorder = rec

    def _sync_params(self, dev: Any, params: list) -> None:
        """Before the first update, unless :meth:`broadcast_params` ran: rank 0's
        parameters to every rank (they are identical from then on)."""
        if not self._synced:
            self.broadcast_params(params)

    def __repr__(self) -> str:
        return f"DistOpt({self.opt!r}, rank {self.global_rank} of {self.world_size})"


def _device_of(t: Any) -> Any:
    if isinstance(t, Tensor):
        return t.device
    from singa.device import device_of

    return device_of(t)


# ----- the recorded kernels (module functions: plain, picklable, stable identities) ------------
def _scaled(scale: float, token: Any, g: Any) -> tuple:
    return (g * g.dtype.type(scale),)


def _mean_of(d: DistOpt, dev: Any, acc: Any, grads: list) -> tuple:
    fn = functools.partial(_fused_mean, d._engine(grads[0]))
    return d._run(dev, fn, grads)


def _fused_mean(engine: Any, token: Any, *grads: Any) -> tuple:
    return coll.fused_sum(engine, grads, 1.0 / engine.world_size)


def _half_mean_of(d: DistOpt, clip: float | None, dev: Any, acc: Any, grads: list) -> tuple:
    fn = functools.partial(_fused_half_mean, d._engine(grads[0]), clip)
    return d._run(dev, fn, grads)


def _fused_half_mean(engine: Any, clip: float | None, token: Any, *grads: Any) -> tuple:
    return coll.fused_sum_half(engine, grads, 1.0 / engine.world_size, clip)


def _sparse_mean_of(d: DistOpt, spars: float, top_k: bool, dev: Any, acc: Any, grads: list) -> tuple:
    fn = functools.partial(_fused_sparse_mean, d._engine(grads[0]), spars, top_k)
    return d._run(dev, fn, [acc, *grads])


def _fused_sparse_mean(engine: Any, spars: float, top_k: bool, token: Any, acc: Any, *grads: Any) -> tuple:
    return coll.sparse_sum(engine, grads, spars, top_k, acc, 1.0 / engine.world_size)


def _clip(opt: Any, token: Any, *grads: Any) -> tuple:
    clipped, opt.last_grad_norm = clip_by_global_norm(list(grads), opt.clip_norm)
    return tuple(clipped)


def _write_back(arrays: tuple, values: tuple) -> None:
    for a, v in zip(arrays, values):
        a[...] = v


def _sum_into(engine: Any, token: Any, *arrays: Any) -> None:
    if len(arrays) == 1 and _contiguous(arrays[0]):
        engine.allreduce(arrays[0])
        return
    _write_back(arrays, coll.fused_sum(engine, arrays))


def _half_into(engine: Any, token: Any, *arrays: Any) -> None:
    _write_back(arrays, coll.fused_sum_half(engine, arrays))


def _sparse_into(engine: Any, spars: float, top_k: bool, token: Any, acc: Any, *arrays: Any) -> None:
    _write_back(arrays, coll.sparse_sum(engine, arrays, spars, top_k, acc))


def _broadcast_into(engine: Any, token: Any, *arrays: Any) -> None:
    flat = engine.broadcast(coll.flatten(arrays))
    _write_back(arrays, coll.split_like(flat, arrays))


def _partial_average(d: DistOpt, engine: Any, token: Any, *params: Any) -> None:
    """Average this step's partition (SINGA's round robin over the fusion groups)."""
    parts = d._partitions
    k = d.partial % len(parts)
    d.partial = (k + 1) % len(parts)
    coll.average_into(engine, [params[i] for i in parts[k]])


#: SINGA's ``dist_option`` values of ``train_one_batch``
DIST_OPTIONS = ("plain", "half", "partialUpdate", "sparseTopK", "sparseThreshold")


def backward_with_option(optimizer: Any, loss: Tensor, dist_option: str = "plain", spars: Any = None) -> None:
    """Back-propagate and update as SINGA's models do for ``dist_option``: ``"plain"``
    calls ``optimizer(loss)``; the others need a :class:`DistOpt` (``"half"``,
    ``"partialUpdate"``, ``"sparseTopK"`` and ``"sparseThreshold"`` with ``spars``)."""
    if dist_option == "plain":
        optimizer(loss)
        return
    if dist_option not in DIST_OPTIONS:
        raise ValueError(f"dist_option must be one of {list(DIST_OPTIONS)}, got {dist_option!r}")
    if not isinstance(optimizer, DistOpt):
        raise ValueError(f"dist_option={dist_option!r} needs a DistOpt, got {type(optimizer).__name__}")
    if dist_option == "half":
        optimizer.backward_and_update_half(loss)
    elif dist_option == "partialUpdate":
        optimizer.backward_and_partial_update(loss)
    else:
        if spars is None:
            raise ValueError(f"dist_option={dist_option!r} needs spars (a fraction or a threshold)")
        optimizer.backward_and_sparse_update(loss, topK=dist_option == "sparseTopK", spars=float(spars))
