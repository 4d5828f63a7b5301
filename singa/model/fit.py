"""``Model.fit``, ``Model.evaluate`` and ``Model.predict`` (Keras's names and
meanings) on SINGA's Model: the loop calls the model's own ``train_one_batch``.

:class:`FitLoop` is the loop itself; ``singa-train`` drives it too, through its
position hooks (``initial_batch``, ``initial_step``, ``initial_sums``) and
``reduce_sums`` (data-parallel ranks add their metric sums).

Metrics are float64 sums over the whole epoch (:mod:`singa.metrics`). The training
``loss`` is the mean of the losses ``train_one_batch`` returned, weighted by batch
size; validation uses ``loss`` (a callable ``(out, y) -> per-sample losses``, by
default softmax cross-entropy for integer labels, mean squared error otherwise).
"""

from __future__ import annotations

import copy
import itertools
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from singa import metrics as _metrics
from singa.callbacks.base import Callback, CallbackList, History
from singa.callbacks.budget import TimeBudget
from singa.callbacks.progress import ProgressBar
from singa.model.batches import (
    ArrayBatches,
    as_batches,
    epoch_batches,
    host,
    is_arrays,
    model_device,
    num_batches,
    peek,
    split_batch,
    split_validation,
    to_tensors,
)
from singa.opt.accumulate import GradientAccumulator
from singa.opt.dist import DistOpt, unwrap_optimizer

__all__ = ["FitLoop", "EvalPass", "EvalStopped", "fit", "evaluate", "predict", "LossFn", "split_result"]

LossFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _loss_value(loss: Any) -> float:
    return float(peek(loss).reshape(-1)[0])


def split_result(result: Any) -> tuple[Any, Any]:
    """``(out, loss)`` of what ``train_one_batch`` returned: a pair ``(out, loss)``, or
    the loss alone (out None)."""
    if isinstance(result, tuple | list) and len(result) >= 2:
        return result[0], result[1]
    return None, result


def _metric_list(names: Sequence | None, y: Any) -> list[_metrics.Metric]:
    if names is None:
        return _metrics.default_metrics(host(y)) if y is not None else []
    return [copy.deepcopy(_metrics.get(m)) for m in names]


def _loss_fn(loss: str | LossFn | None, y: Any) -> LossFn:
    if callable(loss):
        return loss
    if loss is None:
        return _metrics.default_loss(host(y))
    known = {"cross_entropy": _metrics.softmax_cross_entropy, "mse": _metrics.squared_error}
    if loss not in known:
        raise ValueError(f"loss must be a callable or one of {sorted(known)}, got {loss!r}")
    return known[loss]


class EvalPass:
    """One pass of a model in evaluation mode over batches: loss and metrics summed in
    float64 (``reduce_sums`` may add them over data-parallel ranks)."""

    def __init__(
        self, model: Any, metrics: Sequence | None, loss: str | LossFn | None, reduce_sums: Any = None
    ):
        self.model = model
        self.metric_names = metrics
        self.loss = loss
        self.reduce_sums = reduce_sums

    def run(self, data: Any, steps: int | None = None, stop: Callable[[], bool] | None = None) -> dict:
        """``{"loss": ..., <metric>: ...}`` over the batches (nan when there were none)."""
        model, dev = self.model, model_device(self.model)
        prev = model.training
        model.eval()
        loss_m = _metrics.Metric()
        mets: list[_metrics.Metric] | None = None
        fn: LossFn = _metrics.softmax_cross_entropy  # replaced on the first batch
        try:
            for batch in itertools.islice(iter(data), steps):
                if stop is not None and stop():
                    raise EvalStopped("the validation pass was stopped")
                xb, yb = split_batch(batch)
                out = peek(model(*to_tensors(xb, dev)))
                y = host(yb)
                if mets is None:
                    mets, fn = _metric_list(self.metric_names, y), _loss_fn(self.loss, y)
                per = np.asarray(fn(out, y), dtype=np.float64)
                loss_m.total += float(per.sum())
                loss_m.count += len(per)
                for m in mets:
                    m.update(out, y)
        finally:
            model.train(prev)
        return self._results(loss_m, mets or [])

    def _results(self, loss_m: _metrics.Metric, mets: list) -> dict:
        all_m = [loss_m, *mets]
        if self.reduce_sums is not None:
            sums = self.reduce_sums([v for m in all_m for v in m.get_state()])
            for i, m in enumerate(all_m):
                m.set_state(sums[2 * i : 2 * i + 2])
        return {"loss": loss_m.result(), **{m.name: m.result() for m in mets}}


class EvalStopped(Exception):
    """An evaluation pass was asked to stop (its ``stop()`` returned True)."""


class FitLoop:
    """The training loop of :meth:`Model.fit` (see :func:`fit` for the arguments).

    Attributes set before :meth:`run` let a caller continue a run: ``initial_batch``
    (batches of ``initial_epoch`` already done, skipped), ``initial_step`` (batches
    done in all), ``initial_sums`` (the running sums of the epoch in progress:
    ``{"loss": [total, count], <metric>: [...]}``), ``reduce_sums`` (a function adding
    a list of floats over data-parallel ranks) and ``val_stop`` (a function that, when
    True, ends a validation pass early with :class:`EvalStopped`) and ``evaluator`` (a
    function returning the validation logs, ``{"loss": ..., <metric>: ...}``, in place
    of fit's own pass over ``validation_data``).
    """

    def __init__(
        self,
        model: Any,
        data: Any,
        *,
        epochs: int = 1,
        validation_data: Any = None,
        validation_steps: int | None = None,
        callbacks: Sequence[Callback] = (),
        initial_epoch: int = 0,
        steps_per_epoch: int | None = None,
        accumulate: int = 1,
        verbose: int = 1,
        metrics: Sequence | None = None,
        loss: str | LossFn | None = None,
        use_graph: bool = True,
        time_budget: float | str | None = None,
    ):
        if model.optimizer is None:
            raise ValueError(f"{type(model).__name__}.fit: set an optimizer first (model.set_optimizer(...))")
        for name, v, low in (
            ("epochs", epochs, 0),
            ("initial_epoch", initial_epoch, 0),
            ("verbose", verbose, 0),
        ):
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ValueError(f"fit: {name} must be an int >= {low}, got {v!r}")
        if steps_per_epoch is not None and (not isinstance(steps_per_epoch, int) or steps_per_epoch < 1):
            raise ValueError(f"fit: steps_per_epoch must be None or an int >= 1, got {steps_per_epoch!r}")
        self.model, self.data = model, data
        self.epochs, self.initial_epoch = epochs, initial_epoch
        self.validation_data, self.validation_steps = validation_data, validation_steps
        self.steps = steps_per_epoch if steps_per_epoch is not None else num_batches(data)
        self.limit = steps_per_epoch
        self.accumulator = (
            GradientAccumulator(model.optimizer, accumulate, model.get_params) if accumulate != 1 else None
        )
        self.metric_names, self.loss = metrics, loss
        self.use_graph = use_graph
        self.history = History()
        extra: list[Callback] = [TimeBudget(time_budget)] if time_budget is not None else []
        bar = [ProgressBar(epoch_lines=True)] if verbose == 1 else []
        lines = [ProgressBar(epoch_lines=True, bar=False)] if verbose >= 2 else []
        self.callbacks = CallbackList([*bar, *lines, *extra, *callbacks, self.history])
        self.accumulate = accumulate
        self.initial_batch = 0
        self.initial_step = 0
        self.initial_sums: dict | None = None
        self.reduce_sums: Any = _rank_sums(model.optimizer)
        self.val_stop: Callable[[], bool] | None = None
        self.evaluator: Callable[[], dict] | None = None
        self.step = 0
        self.device: Any = None
        self.train_metrics: list[_metrics.Metric] | None = None
        self.loss_metric = _metrics.Mean("loss")

    # ----- one batch ------------------------------------------------------------------------
    def _compile(self, xs: tuple) -> None:
        model = self.model
        if not model.initialized:
            model.compile(list(xs), is_train=True, use_graph=self.use_graph)

    def train_batch(self, xb: Any, yb: Any, last_of_epoch: bool) -> tuple[Any, float]:
        """One training step through the model's ``train_one_batch``; returns the output
        (or None) and the loss."""
        model = self.model
        if self.device is None:
            self.device = model_device(model)
        xs = to_tensors(xb, self.device)
        args = xs if yb is None else (*xs, *to_tensors(yb, self.device))
        if not model.initialized:
            self._compile(xs)
        if not model.training:  # a model built here, or one a callback left in eval mode
            model.train()
        if self.accumulator is None:  # no optimizer swap: an attribute set costs ~5 us a step
            out, loss = split_result(model(*args))
            return out, _loss_value(loss)
        opt = model.optimizer
        model.optimizer = self.accumulator.phase(last_of_epoch)
        try:
            out, loss = split_result(model(*args))
        finally:
            model.optimizer = opt
        return out, _loss_value(loss)

    def _update_metrics(self, out: Any, yb: Any, loss: float, n: int) -> None:
        if self.train_metrics is None:
            self.train_metrics = _metric_list(self.metric_names, yb) if out is not None else []
            self._restore_sums()
        self.loss_metric.update(loss, n)
        if out is not None and yb is not None:
            o, y = peek(out), yb
            for m in self.train_metrics:
                m.update(o, y)

    def _running_logs(self) -> dict:
        return {"loss": self.loss_metric.result(), **{m.name: m.result() for m in self.train_metrics or []}}

    def _restore_sums(self) -> None:
        sums, self.initial_sums = self.initial_sums, None
        for m in [self.loss_metric, *(self.train_metrics or [])]:
            if sums and m.name in sums:
                m.set_state(sums[m.name])

    def sums(self) -> dict:
        """The running sums of the epoch in progress (for a checkpoint)."""
        return {m.name: m.get_state() for m in [self.loss_metric, *(self.train_metrics or [])]}

    # ----- epochs -----------------------------------------------------------------------------
    def _epoch(self, epoch: int, skip: int) -> int:
        """Train one epoch (from batch ``skip``); returns the samples seen."""
        seen = 0
        limit = None if self.limit is None else self.limit
        last = None if self.steps is None else self.steps - 1
        hooks = self.callbacks.implements_train_batch_hooks()
        for i, batch in enumerate(epoch_batches(self.data, epoch, skip, limit), start=skip):
            xb, yb = split_batch(batch)
            yb = None if yb is None else host(yb)
            if hooks:
                self.callbacks.on_train_batch_begin(i)
            out, loss = self.train_batch(xb, yb, last_of_epoch=i == last)
            n = len(yb) if yb is not None else len(xb[0] if isinstance(xb, tuple | list) else xb)
            seen += n
            self.step += 1
            self._update_metrics(out, yb, loss, n)
            if hooks:
                self.callbacks.on_train_batch_end(i, {**self._running_logs(), "batch_loss": loss, "size": n})
            if self.model.stop_training:
                break
        return seen

    def validate(self) -> dict:
        """The validation pass (with the callbacks' test hooks): ``val_`` logs."""
        if self.validation_data is None:
            return {}
        self.callbacks.on_test_begin()
        if self.evaluator is not None:
            res = self.evaluator()
        else:
            ev = EvalPass(self.model, self.metric_names, self.loss, self.reduce_sums)
            res = ev.run(self.validation_data, self.validation_steps, self.val_stop)
        self.callbacks.on_test_end(res)
        return {f"val_{k}": v for k, v in res.items()}

    def _epoch_logs(self, seen: int, seconds: float) -> dict:
        if self.reduce_sums is not None:
            ms = [self.loss_metric, *(self.train_metrics or [])]
            sums = self.reduce_sums([v for m in ms for v in m.get_state()])
            for i, m in enumerate(ms):
                m.set_state(sums[2 * i : 2 * i + 2])
        logs = {"loss": self.loss_metric.result(), **{m.name: m.result() for m in self.train_metrics or []}}
        logs.update(self.validate())
        logs["lr"] = float(unwrap_optimizer(self.model.optimizer).get_lr())
        logs["samples_per_s"] = seen / seconds if seconds > 0 else 0.0
        return logs

    def params(self) -> dict:
        """The settings the callbacks see."""
        planned = None
        if self.steps is not None:
            planned = max(0, (self.epochs - self.initial_epoch) * self.steps - self.initial_batch)
        return {
            "epochs": self.epochs,
            "steps": self.steps,
            "initial_epoch": self.initial_epoch,
            "initial_batch": self.initial_batch,
            "initial_step": self.initial_step,
            "accumulate": self.accumulate,
            "planned_batches": planned,
            "loader": self.data,
            "accumulator": self.accumulator,
            "callbacks": self.callbacks.callbacks,
        }

    def run(self) -> History:
        """Train; returns the :class:`~singa.callbacks.History`."""
        model, cbs = self.model, self.callbacks
        model.stop_training = False
        model.history = self.history
        cbs.set_model(model)
        cbs.set_params(self.params())
        self.step = self.initial_step
        logs: dict = {}
        cbs.on_train_begin()
        try:
            for epoch in range(self.initial_epoch, self.epochs):
                skip = self.initial_batch if epoch == self.initial_epoch else 0
                if epoch != self.initial_epoch or self.initial_sums is None:
                    self._reset_metrics()
                elif self.metric_names is not None and self.train_metrics is None:
                    self.train_metrics = _metric_list(self.metric_names, None)
                    self._restore_sums()
                cbs.on_epoch_begin(epoch)
                model.train()
                t0 = time.perf_counter()
                seen = self._epoch(epoch, skip)
                if seen == 0 and skip == 0:
                    warnings.warn(
                        f"fit: epoch {epoch + 1} had no batches; stopping", RuntimeWarning, stacklevel=3
                    )
                    break
                logs = self._epoch_logs(seen, time.perf_counter() - t0)
                cbs.on_epoch_end(epoch, logs)
                if model.stop_training:
                    break
        except BaseException:
            _quietly(cbs.on_train_end, {**logs, "error": True})
            raise
        cbs.on_train_end(logs)
        return self.history

    def _reset_metrics(self) -> None:
        self.loss_metric.reset()
        for m in self.train_metrics or []:
            m.reset()


def _rank_sums(optimizer: Any) -> Any:
    """Data-parallel training (a DistOpt on more than one rank): the function adding a
    list of floats over the ranks, so the epoch's metrics are those of the global batch."""
    if isinstance(optimizer, DistOpt) and optimizer.world_size > 1:
        return optimizer.communicator.sum_scalars
    return None


def _quietly(fn: Callable, *args: Any) -> None:
    try:
        fn(*args)
    except Exception as e:  # the first error is the one to report
        warnings.warn(f"a callback failed while stopping after an error: {e!r}", RuntimeWarning, stacklevel=2)


def fit(
    model: Any,
    x: Any,
    y: Any = None,
    *,
    batch_size: int = 32,
    epochs: int = 1,
    validation_data: Any = None,
    validation_split: float = 0.0,
    validation_steps: int | None = None,
    shuffle: bool = True,
    seed: int | None = None,
    callbacks: Sequence[Callback] = (),
    initial_epoch: int = 0,
    steps_per_epoch: int | None = None,
    accumulate: int = 1,
    verbose: int = 1,
    metrics: Sequence | None = None,
    loss: str | LossFn | None = None,
    use_graph: bool = True,
    time_budget: float | str | None = None,
) -> History:
    """Train ``model`` (see :meth:`singa.model.Model.fit`)."""
    if validation_split:
        x, y, vx, vy = split_validation(x, y, validation_split)
        if validation_data is None:
            validation_data = (vx, vy)
    data = as_batches(x, y, batch_size, shuffle, seed)
    val = _val_batches(validation_data, batch_size)
    loop = FitLoop(
        model,
        data,
        epochs=epochs,
        validation_data=val,
        validation_steps=validation_steps,
        callbacks=callbacks,
        initial_epoch=initial_epoch,
        steps_per_epoch=steps_per_epoch,
        accumulate=accumulate,
        verbose=verbose,
        metrics=metrics,
        loss=loss,
        use_graph=use_graph,
        time_budget=time_budget,
    )
    return loop.run()


def _val_batches(validation_data: Any, batch_size: int) -> Any:
    """``(x_val, y_val)`` arrays as batches; a loader or iterable of batches as it is."""
    if validation_data is None:
        return None
    if isinstance(validation_data, tuple) and len(validation_data) == 2:
        vx, vy = validation_data
        if is_arrays(vx) and vy is not None:
            return as_batches(vx, vy, batch_size, False, 0)
    return as_batches(validation_data, None, batch_size, False, 0)


def evaluate(
    model: Any,
    x: Any,
    y: Any = None,
    *,
    batch_size: int = 32,
    steps: int | None = None,
    metrics: Sequence | None = None,
    loss: str | LossFn | None = None,
    callbacks: Sequence[Callback] = (),
) -> dict:
    """The loss and metrics of ``model`` on the data (see :meth:`singa.model.Model.evaluate`)."""
    data = as_batches(x, y, batch_size, False, 0)
    cbs = CallbackList(callbacks)
    cbs.set_model(model)
    cbs.on_test_begin()
    res = EvalPass(model, metrics, loss).run(data, steps)
    cbs.on_test_end(res)
    return res


def predict(model: Any, x: Any, *, batch_size: int = 32, steps: int | None = None) -> np.ndarray:
    """The model's outputs in evaluation mode, batch by batch, as one numpy array (see
    :meth:`singa.model.Model.predict`)."""
    data = as_batches(x, None, batch_size, False, 0)
    dev = model_device(model)
    prev = model.training
    model.eval()
    outs = []
    try:
        for batch in epoch_batches(data, 0, 0, steps):
            xb = batch if isinstance(data, ArrayBatches) else split_batch(batch)[0]
            outs.append(host(model(*to_tensors(xb, dev))))
    finally:
        model.train(prev)
    if not outs:
        raise ValueError("predict: the data holds no batches")
    return np.concatenate(outs, axis=0)
