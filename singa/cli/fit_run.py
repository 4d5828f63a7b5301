"""``singa-train``'s training loop on :class:`singa.model.fit.FitLoop`: the loop is
fit's; this module adds what is about the command line, as callbacks.

:class:`CliRun` keeps the run's :class:`~singa.cli.run_state.RunState` in step with the
loop (position, running sums, times), draws the progress bar, stops on divergence
(``check_loss``), on Ctrl-C (agreed by every rank at the same step; the checkpoint is
saved and :class:`~singa.cli.errors.Interrupted` raised) and at ``--max-steps``, and at
each epoch's end writes the ``epoch`` record and line and saves the checkpoint.
:func:`option_callbacks` turns ``--early-stop``, ``--tensorboard`` and ``--time-budget``
into fit's callbacks; ``--keep`` is :class:`CheckpointFiles`.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

from singa import callbacks, metrics
from singa.cli.ckpt_options import save_due
from singa.cli.guards import check_loss
from singa.cli.output import Progress, format_epoch
from singa.cli.regression import Unstandardised, epoch_metrics
from singa.model.fit import FitLoop

__all__ = [
    "CliRun",
    "CheckpointFiles",
    "ReplayHistory",
    "build_loop",
    "checkpoint_aux",
    "continued",
    "option_callbacks",
    "stop_note",
]


def _finite(v: Any) -> float | None:
    return float(v) if v is not None and math.isfinite(v) else None


class CheckpointFiles:
    """Where ``--checkpoint`` writes: the path itself, or with ``{epoch}`` in it one file
    per epoch (``{epoch}`` the epochs done), of which ``--keep N`` keeps the N newest."""

    def __init__(self, template: str | None, keep: int | None):
        self.template = template
        self.keep = keep
        self.written: list[str] = []

    def path(self, epochs_done: int) -> str | None:
        """The file for a save after ``epochs_done`` epochs."""
        if not self.template:
            return None
        return self.template.replace("{epoch}", str(epochs_done))

    def saved(self, path: str) -> None:
        """Note a written file; delete those beyond the newest ``keep``."""
        self.written = [p for p in self.written if p != path] + [path]
        if self.keep is None or "{epoch}" not in (self.template or ""):
            return
        while len(self.written) > self.keep:
            old = self.written.pop(0)
            try:
                os.remove(old)
            except FileNotFoundError:
                pass


class CliRun(callbacks.Callback):
    """The command line's part of the loop (see the module's docstring).

    Args:
        trainer: the :class:`~singa.cli.trainer.Trainer` (its settings, output, rank,
            ``save`` and ``interrupted``).
        state: the run's position and sums, kept up to date.
        log: the JSON-lines log.
        flag: the Ctrl-C flag (``flag.set``).
    """

    def __init__(self, trainer: Any, state: Any, log: Any, flag: Any):
        super().__init__()
        self.trainer = trainer
        self.state = state
        self.log = log
        self.flag = flag
        self.loop: FitLoop | None = None
        self.bar: Any = None
        self.partial: dict | None = None
        self.stopped_by_steps = False
        self._training = False

    # ----- the epoch's training part --------------------------------------------------------
    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        """Open the bar; start the epoch's clock."""
        cfg, st = self.trainer.cfg, self.state
        self.bar = Progress(self.trainer.steps, st.batch, f"epoch {epoch + 1}/{cfg.epochs}", not cfg.quiet)
        self.t0 = time.perf_counter()
        self.t_prev = st.epoch_time
        self._training = True

    def on_train_batch_end(self, step: int, logs: dict | None = None) -> None:
        """Check the loss, move the position, stop at Ctrl-C or ``--max-steps``."""
        cfg, st, logs = self.trainer.cfg, self.state, logs or {}
        check_loss(logs["batch_loss"], st.step + 1, self.trainer.info.num_classes, cfg)
        st.batch += 1
        st.step += 1
        self.bar.update(logs["loss"], logs.get("accuracy", math.nan), logs["size"])
        if self.trainer.dist.agree(self.flag.set):  # every rank stops at the same step
            self.flag.set = True
            self._end_training()
            self._sync_sums(reduce=True)
            self.trainer.interrupted(st, self.log)
        if cfg.max_steps is not None and st.step >= cfg.max_steps:
            self.stopped_by_steps = True
            self.model.stop_training = True
        elif save_due(cfg, st.step) and st.batch < self.trainer.steps:  # --save-every (mid-epoch)
            self._sync_sums(reduce=True)
            self.trainer.save(st)

    def _end_training(self) -> None:
        """Close the bar and add the training time (once per epoch)."""
        if not self._training:
            return
        self._training = False
        self.bar.close()
        dt = time.perf_counter() - self.t0
        self.state.epoch_time = self.t_prev + dt
        self.state.train_time += dt

    def _sync_sums(self, reduce: bool) -> None:
        """Copy the loop's running sums into the state (added over the ranks first when
        ``reduce``: the loop has not done it yet)."""
        loop = self.loop
        if loop is None:  # pragma: no cover - build_loop sets it
            return
        sums = loop.sums()
        st = self.state
        st.loss_sum, st.seen = sums["loss"][0], int(sums["loss"][1])
        if self.trainer.target is None:
            st.correct = int(round(sums.get("accuracy", [0, 0])[0]))
        else:  # regression: the running sum of the absolute errors (target units)
            st.correct = float(sums.get("mae", [0.0, 0])[0])
        if reduce:
            self.trainer.dist.add_sums(st)

    # ----- validation and the epoch's end --------------------------------------------------
    def on_test_begin(self, logs: dict | None = None) -> None:
        """The training part ended: its time; a stop that came after the last step."""
        self._end_training()
        self._sync_sums(reduce=False)  # the loop added them over the ranks already
        self.flag.set = self.trainer.dist.agree(self.flag.set)
        if self.flag.set:
            self.trainer.interrupted(self.state, self.log)
        self.t1 = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """The epoch's record, line and checkpoint."""
        logs, st, trainer = logs or {}, self.state, self.trainer
        epoch_done = st.batch >= trainer.steps
        rec = {
            "epoch": epoch + 1,
            "step": st.step,
            "partial": not epoch_done,
            "train_loss": _finite(st.loss_sum / st.seen) if st.seen else None,
            "train_acc": st.correct / st.seen if st.seen else None,
            "val_loss": _finite(logs.get("val_loss")),
            "val_acc": _finite(logs.get("val_accuracy")),
            "time_s": st.epoch_time,
            "eval_time_s": time.perf_counter() - self.t1,
            "samples_per_s": st.seen / st.epoch_time if st.epoch_time > 0 else 0.0,
            "lr": trainer.optimizer.get_lr(),
        }
        if trainer.target is not None:  # MSE and MAE in the target's units, not accuracy
            del rec["train_acc"], rec["val_acc"]
            rec.update(epoch_metrics(trainer.target, st.loss_sum, st.correct, st.seen, logs))
        self.log.write("epoch", **rec)
        trainer.out.info(format_epoch(rec, trainer.cfg.epochs, trainer.info.test_split))
        if epoch_done:
            st.history.append(rec)
            st.epoch += 1
            st.batch = 0
            st.loss_sum, st.correct, st.seen, st.epoch_time = 0.0, 0, 0, 0.0
        else:
            self.partial = rec
            self.model.stop_training = True
        trainer.save(st)

    def on_train_end(self, logs: dict | None = None) -> None:
        """Close a bar a failure left open."""
        if self._training:
            self._training = False
            self.bar.close()


def option_callbacks(cfg: Any, is_main: bool) -> list[callbacks.Callback]:
    """The callbacks of ``--ema``, ``--early-stop``, ``--tensorboard`` and ``--time-budget``
    (the EMA first: see :func:`build_loop`)."""
    out: list[callbacks.Callback] = []
    if cfg.ema is not None:
        out.append(callbacks.EMA(cfg.ema))
    if cfg.early_stop is not None:
        out.append(callbacks.EarlyStopping(monitor="val_loss", patience=cfg.early_stop))
    if cfg.tensorboard and is_main:
        out.append(callbacks.TensorBoard(cfg.tensorboard))
    if cfg.time_budget is not None:
        out.append(callbacks.TimeBudget(cfg.time_budget))
    return out


class ReplayHistory(callbacks.Callback):
    """On a resumed run, shows the finished epochs' records (the run state's
    ``history``) to the callbacks that count epochs (``--early-stop``'s EarlyStopping),
    right after their ``on_train_begin`` reset them: they then stop at the epoch an
    uninterrupted run stops at, where a reset would have counted patience afresh."""

    def __init__(self, history: list, counting: list):
        super().__init__()
        self.history = list(history)
        self.counting = list(counting)

    def on_train_begin(self, logs: dict | None = None) -> None:
        """Count every finished epoch again, in order."""
        for rec in self.history:
            epoch_logs = {"val_loss": rec.get("val_loss"), "loss": rec.get("train_loss")}
            for cb in self.counting:
                cb.on_epoch_end(int(rec["epoch"]) - 1, {k: v for k, v in epoch_logs.items() if v is not None})


def continued(extra: list, aux: dict) -> list:
    """``extra``, the option callbacks, with an EMA continuing the averages stored in a
    resumed checkpoint's ``aux`` states (none when starting afresh)."""
    for cb in extra:
        if isinstance(cb, callbacks.EMA):
            cb.load_aux(aux)
    return extra


def checkpoint_aux(cbs: list) -> dict:
    """The arrays the callbacks ``cbs`` add to a checkpoint (``--ema``'s averages)."""
    aux: dict = {}
    for cb in cbs:
        aux.update(cb.checkpoint_aux())
    return aux


def build_loop(trainer: Any, state: Any, run: CliRun, extra: list) -> FitLoop:
    """fit's loop over the trainer's loaders, continuing from ``state``; validation is
    the trainer's ``validate()``."""
    cfg = trainer.cfg
    ema = [cb for cb in extra if isinstance(cb, callbacks.EMA)]
    others = [cb for cb in extra if not isinstance(cb, callbacks.EMA)]
    loop = FitLoop(
        trainer.model,
        trainer.train_loader,
        epochs=cfg.epochs,
        validation_data=trainer.val_loader,
        # an EMA averages each batch before the run's hook can save it mid-epoch, so a
        # checkpoint's averages are those of its weights (an exact resume)
        callbacks=[*ema, run, *others, *_replay(state, extra)],
        initial_epoch=state.epoch,
        accumulate=cfg.accumulate,
        verbose=0,
        metrics=["accuracy"]
        if trainer.target is None
        else [Unstandardised(metrics.MeanAbsoluteError(), trainer.target)],
        use_graph=cfg.graph,
    )
    loop.initial_batch = state.batch
    loop.initial_step = state.step
    key = "accuracy" if trainer.target is None else "mae"
    loop.initial_sums = {"loss": [state.loss_sum, state.seen], key: [float(state.correct), state.seen]}
    loop.evaluator = trainer.validate
    if loop.accumulator is not None:  # --accumulate: continue an update in progress at the save
        loop.accumulator.load_aux(trainer.resumed_aux)
        trainer.aux_callbacks = [*trainer.aux_callbacks, loop.accumulator]
    run.loop = loop
    return loop


def _replay(state: Any, extra: list) -> list:
    """A :class:`ReplayHistory` for a resumed run with epoch-counting callbacks."""
    counting = [cb for cb in extra if isinstance(cb, callbacks.EarlyStopping)]
    return [ReplayHistory(state.history, counting)] if counting and state.history else []


def stop_note(cfg: Any, run: CliRun, extra: list, epochs_done: int) -> str:
    """Why the run ended before its epochs: `` (stopped by --max-steps N)`` and the like,
    or ""."""
    for cb in extra:
        if isinstance(cb, callbacks.TimeBudget) and cb.stopped:
            return " (stopped by --time-budget)"
        if isinstance(cb, callbacks.EarlyStopping) and cb.stopped_epoch > 0:
            return f" (stopped early by --early-stop {cfg.early_stop})"
    if run.partial or (run.stopped_by_steps and epochs_done < cfg.epochs):
        return f" (stopped by --max-steps {cfg.max_steps})"
    return ""
