"""The training loop of ``singa-train``: data, model, optimizer, epochs with
validation, checkpoints after every epoch and on Ctrl-C, exact resume.

Exact resume: a checkpoint holds the model's states, the optimizer's (slots, step
counts, hence the schedule's position), the device's random generator, and under
the aux state ``singa_train`` the run: its settings, the epoch in progress and how
many of its batches are done, the epoch's running sums and the finished epochs'
metrics. The training order of epoch ``e`` is the DataLoader's permutation for
``(seed, e)`` (``set_epoch``), so a resumed run skips the batches already done and
continues exactly where the interrupted one stopped: on the CPU its final parameters
are bitwise those of an uninterrupted run.
"""

from __future__ import annotations

import math
import time
from functools import partial

import numpy as np

from singa import data, image_tool, sonnx
from singa.checkpoint import CheckpointError
from singa.cli import fit_run
from singa.cli.ckpt_options import ManagedCheckpoints, resolve_resume
from singa.cli.common import (
    RUN_STATE_KEY,
    EvalStopped,
    check_writable,
    count_params,
    create_model,
    evaluate,
    load_data,
    make_device,
    make_optimizer,
    placeholder,
)
from singa.cli.config import TrainConfig
from singa.cli.errors import CliError, Interrupted
from singa.cli.fit_options import RESUMED_FIT_SETTINGS
from singa.cli.fit_run import CheckpointFiles, CliRun, build_loop, option_callbacks, stop_note
from singa.cli.guards import check_params, val_batches
from singa.cli.output import (
    JsonLog,
    Progress,  # noqa: F401  (the loop's bar, drawn by singa.cli.fit_run; kept here for callers)
    fmt_time,
    matplotlib_available,
    write_plot,
)
from singa.cli.parallel import DistRun
from singa.cli.regression import evaluate_regression, prepare_targets, use_mse
from singa.cli.run_state import RUN_STATE_VERSION, RunState, SigintFlag
from singa.cli.user_options import RESUMED_USER_SETTINGS, data_options, fine_tune, report_skipped, train_stats

__all__ = ["Trainer", "RunState", "RUN_STATE_VERSION"]

#: the settings a resumed run takes from its checkpoint unless given again
_RESUMED_SETTINGS = (
    "model",
    "data",
    "batch_size",
    "optimizer",
    "scheduler",
    "warmup",
    "seed",
    "epochs",
    "precision",
    "augment",
    *RESUMED_USER_SETTINGS,
    *RESUMED_FIT_SETTINGS,
)


def eval_batch_size(batch_size: int, info: data.DatasetInfo) -> int:
    """Validation batches: at least 256 samples for images up to 64x64 (fewer, larger
    matrix products), the training batch size for larger images (memory)."""
    pixels = int(np.prod(info.image_size)) if len(info.image_size) else 1
    return max(batch_size, 256) if pixels <= 64 * 64 else batch_size


def _finite(v: float) -> float | None:
    return float(v) if v is not None and math.isfinite(v) else None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


class Trainer:
    """One ``singa-train`` run.

    Args:
        cfg: the settings (command line, config file and defaults merged).
        explicit: the names of settings given on the command line or in the config
            file (a resumed run takes the others from its checkpoint).
        dist: this process's rank of a data-parallel job (default: made from the
            environment; a single process unless started by mpiexec).
    """

    def __init__(
        self, cfg: TrainConfig, explicit: set[str] | frozenset = frozenset(), dist: DistRun | None = None
    ):
        self.cfg = cfg
        self.explicit = set(explicit)
        self.dist = dist if dist is not None else DistRun()
        self.out = self.dist.console(cfg.quiet, cfg.verbose)
        self.target = None  # a regression's target scale (singa.cli.regression), set by run()
        self.resumed_aux: dict = {}  # the --resume checkpoint's aux states
        self.aux_callbacks: list = []  # callbacks whose checkpoint_aux() every save stores

    # ----- setup --------------------------------------------------------------------------
    def _apply_resume_settings(self) -> dict:
        """Read the ``--resume`` checkpoint's run and take its trajectory settings
        that were not given explicitly; returns the stored run dict."""
        cfg = self.cfg
        try:
            from singa.cli.common import read_run_state

            run = read_run_state(cfg.resume)
        except CheckpointError as e:
            raise CliError(
                f"cannot resume from {cfg.resume}: {str(e).splitlines()[0]}", details=str(e)
            ) from e
        if run is None or not isinstance(run.get("config"), dict):
            raise CliError(
                f"cannot resume from {cfg.resume}: it holds no singa-train run state "
                "(only checkpoints written by singa-train --checkpoint can be resumed)"
            )
        if run.get("version") != RUN_STATE_VERSION:
            raise CliError(
                f"cannot resume from {cfg.resume}: run state version {run.get('version')!r} is unknown"
            )
        stored = run["config"]
        differ = []
        for key in _RESUMED_SETTINGS:
            if key not in stored:
                continue
            if key in self.explicit:
                if getattr(cfg, key) != stored[key] and key != "epochs":
                    differ.append(f"{key} {stored[key]!r} -> {getattr(cfg, key)!r}")
            else:
                setattr(cfg, key, stored[key])
        for key in ("lr", "momentum", "weight_decay"):
            if key in stored and key not in self.explicit:
                setattr(cfg, key, stored[key])
            elif key in stored and getattr(cfg, key) is not None and getattr(cfg, key) != stored[key]:
                differ.append(f"{key} {stored[key]!r} -> {getattr(cfg, key)!r}")
        self._resume_warning = None
        if differ:
            self._resume_warning = (
                "resuming with changed settings (the run will differ from an uninterrupted one): "
                + ", ".join(differ)
            )
        if cfg.checkpoint is None:
            cfg.checkpoint = cfg.resume
        return run

    def _prepare_outputs(self) -> None:
        cfg = self.cfg
        for attr, what in (("checkpoint", "checkpoint"), ("export_onnx", "ONNX file"), ("log", "log")):
            path = getattr(cfg, attr)
            if path:
                setattr(cfg, attr, check_writable(path, what))
        plot = cfg.plot_path
        if plot and (cfg.plot or matplotlib_available()):
            cfg.plot = check_writable(plot, "plot")

    # ----- the run --------------------------------------------------------------------------
    def run(self) -> dict:
        """Train; returns the summary dict. Raises :class:`Interrupted` after Ctrl-C
        (the checkpoint saved) and :class:`CliError` for expected failures."""
        cfg = self.cfg
        resolve_resume(cfg, self.out.warn, self.out.info)  # --resume auto|DIR: a file or none
        stored_run = self._apply_resume_settings() if cfg.resume else None
        dist = self.dist
        dist.only_main_writes(cfg)
        self._prepare_outputs()
        self.files = CheckpointFiles(cfg.checkpoint, cfg.keep)
        self.managed = ManagedCheckpoints(cfg) if cfg.checkpoint_dir and dist.is_main else None
        dev = make_device(cfg.device)
        ds = dist.rank_first(
            lambda: load_data(cfg.data, cfg.data_dir, cfg.download, not cfg.quiet, data_options(cfg))
        )
        info = ds.info
        self.target = prepare_targets(ds)  # --task regression: standardised targets (or None)
        report_skipped(ds, self.out.warn)
        if cfg.augment and len(info.sample_shape) != 3:
            raise CliError(f"--augment needs images (C, H, W); {cfg.data} has samples {info.sample_shape}")
        mean, std = train_stats(ds)
        train = dist.loader(
            ds.x_train,
            ds.y_train,
            cfg.batch_size,
            shuffle=True,
            seed=cfg.seed,
            drop_last=True,
            mean=mean,
            std=std,
            transform=image_tool.augment_batch if cfg.augment else None,
            workers=cfg.workers,
        )
        val = dist.loader(
            ds.x_test,
            ds.y_test,
            eval_batch_size(cfg.batch_size, info),
            mean=mean,
            std=std,
            workers=cfg.workers,
        )
        steps = len(train)
        if steps == 0:
            raise CliError(
                f"--batch-size {cfg.batch_size} is larger than the {len(ds.x_train)} "
                f"training samples of {cfg.data}"
            )
        dev.set_rand_seed(cfg.seed)
        try:
            model = create_model(cfg.model, info, cfg.model_args)
        except ValueError as e:
            raise CliError(f"cannot build {cfg.model} for {cfg.data}: {e}") from e
        if self.target is not None:
            use_mse(model, cfg.model)
        optimizer = dist.optimizer(make_optimizer(cfg, -(-steps // cfg.accumulate)))  # updates per epoch
        model.set_optimizer(optimizer)
        try:
            model.compile(
                [placeholder(cfg.batch_size, info, dev)],
                is_train=True,
                use_graph=cfg.graph,
                sequential=cfg.sequential,
                precision=cfg.precision,
            )
        except ValueError as e:
            raise CliError(
                f"{cfg.model} does not fit {cfg.data} ({'x'.join(map(str, info.sample_shape))}): {e}"
            ) from e

        fine_tune(model, cfg, self.out, resuming=bool(cfg.resume))
        if cfg.summary:
            self.out.info(model.summary(print_fn=None))
        state = RunState()
        if cfg.resume:
            try:
                aux = model.load_states(cfg.resume)
            except CheckpointError as e:
                lines = str(e).splitlines()
                raise CliError(
                    f"checkpoint {cfg.resume} does not match {cfg.model} on {cfg.data}: "
                    + (lines[1].strip() if len(lines) > 1 else lines[0])
                    + (f" (+{len(lines) - 2} more)" if len(lines) > 2 else ""),
                    details=str(e),
                ) from e
            self.resumed_aux = aux
            run = aux.get(RUN_STATE_KEY, stored_run)
            state = RunState.from_json(run["state"])
            try:
                dist.resume_position(run, state, steps, cfg.batch_size, self.out)
            except CliError as e:
                raise CliError(str(e).replace("cannot resume", f"cannot resume from {cfg.resume}")) from e
            if self._resume_warning:
                self.out.warn(self._resume_warning)

        self.model, self.optimizer, self.dev, self.info = model, optimizer, dev, info
        self.mean, self.std = mean, std
        self.train_loader, self.val_loader, self.steps = train, val, steps
        self.n_params = count_params(model)
        log = JsonLog(cfg.log, append=bool(cfg.resume))
        try:
            self._header(ds, state)
            log.write(
                "start",
                config=cfg.to_json(),
                dataset=self._dataset_json(ds),
                params=self.n_params,
                steps_per_epoch=steps,
                resumed_from=cfg.resume,
                step=state.step,
                epoch=state.epoch,
            )
            return self._loop(state, log)
        finally:
            log.close()

    def _dataset_json(self, ds: data.Dataset) -> dict:
        info = ds.info
        return {
            "name": info.name,
            "num_classes": info.num_classes,
            "sample_shape": list(info.sample_shape),
            "train": len(ds.x_train),
            info.test_split: len(ds.x_test),
            "source": info.source,
        }

    def _header(self, ds: data.Dataset, state: RunState) -> None:
        cfg, out, info = self.cfg, self.out, self.info
        shape = "x".join(map(str, info.sample_shape))
        opt_desc = f"{cfg.optimizer} lr {cfg.effective_lr:g}"
        if cfg.optimizer in ("sgd", "rmsprop") and cfg.effective_momentum:
            opt_desc += f" momentum {cfg.effective_momentum:g}"
        if cfg.effective_weight_decay:
            opt_desc += f" weight decay {cfg.effective_weight_decay:g}"
        opt_desc += f", {cfg.scheduler} lr" + (f" (warm-up {cfg.warmup} steps)" if cfg.warmup else "")
        out.info(
            f"singa-train: {cfg.model} ({self.n_params:,} parameters) on {info.name} "
            f"({len(ds.x_train)} train / {len(ds.x_test)} {info.test_split}, {shape}, "
            + ("regression)" if self.target is not None else f"{info.num_classes} classes)")
        )
        mode = "graph" + (" (sequential)" if cfg.sequential else "") if cfg.graph else "eager"
        mode += ", augmented" if cfg.augment else ""
        mode += "" if cfg.precision == "float32" else f", {cfg.precision} precision"
        out.info(
            f"  {opt_desc}, batch {cfg.batch_size}, {cfg.epochs} epoch{'s' if cfg.epochs != 1 else ''} "
            f"of {self.steps} steps, "
            f"{mode}, {'cpu' if not self.dev.is_gpu else f'gpu {self.dev.id}'}, seed {cfg.seed}"
        )
        if self.dist.distributed:
            out.info(self.dist.describe(cfg.batch_size))
        if cfg.resume:
            out.info(
                f"  resumed from {cfg.resume} at step {state.step} "
                f"(epoch {state.epoch + 1}, batch {state.batch})"
            )
        out.detail(
            f"  data from {info.source}; normalisation mean {self.mean.tolist()} std {self.std.tolist()}"
        )
        out.detail(f"  model: {self.model!r}")

    # ----- checkpoints -------------------------------------------------------------------------
    def _run_json(self, state: RunState) -> dict:
        info = self.info
        return {
            "version": RUN_STATE_VERSION,
            "config": {**self.cfg.to_json(), **self.cfg.trajectory()},
            "dataset": {
                "name": info.name,
                "num_classes": info.num_classes,
                "num_channels": info.num_channels,
                "image_size": list(info.image_size),
                "class_names": list(info.class_names),
            },
            "normalization": {"mean": [float(v) for v in self.mean], "std": [float(v) for v in self.std]},
            **({"target_normalization": self.target.to_json()} if self.target is not None else {}),
            "steps_per_epoch": self.steps,
            **self.dist.run_json(self.cfg.batch_size),
            "state": state.to_json(),
        }

    def save(self, state: RunState) -> None:
        """Save the checkpoint (``--checkpoint``, ``{epoch}`` filled in) with the run state;
        every rank waits for it."""
        path = self.files.path(state.epoch) if not self.cfg.checkpoint_dir else None
        aux = {RUN_STATE_KEY: self._run_json(state), **fit_run.checkpoint_aux(self.aux_callbacks)}
        if self.managed is not None or path:
            check_params(self.model, state.step, self.cfg)
        if self.managed is not None:  # --checkpoint-dir (singa/cli/ckpt_options.py)
            try:
                self.managed.save(state.step, self.model, aux, state.history, state.batch == 0)
            except OSError as e:
                folder = self.cfg.checkpoint_dir
                raise CliError(f"cannot write a checkpoint in {folder}: {e.strerror or e}") from e
        elif path:
            try:
                self.model.save_states(path, aux_states=aux)
            except OSError as e:
                raise CliError(f"cannot write the checkpoint {path}: {e.strerror or e}") from e
            self.files.saved(path)
        self.dist.barrier()  # no rank ends (and has the job ended) while rank 0 writes

    # ----- the loop (fit's, singa.cli.fit_run) -------------------------------------------------------
    def validate(self) -> dict:
        """The validation pass of an epoch (over every rank's shard): ``loss``, ``accuracy``.
        Ctrl-C during it raises :class:`EvalStopped` (one process)."""
        flag = self.flag
        fn = evaluate if self.target is None else partial(evaluate_regression, self.target)
        vloss, vacc = self.dist.evaluate(
            fn,
            self.model,
            self.val_loader,
            self.dev,
            lambda: flag.set,
            max_batches=val_batches(self.cfg, self.steps, len(self.val_loader)),
        )
        if self.target is not None:  # (MSE, MAE) in the target's units; the loss is standardised
            return {"loss": vloss / self.target.std**2, "mse": vloss, "mae": vacc}
        return {"loss": vloss, "accuracy": vacc}

    def _loop(self, state: RunState, log: JsonLog) -> dict:
        cfg = self.cfg
        t_run = time.perf_counter()
        if cfg.max_steps is not None and state.step >= cfg.max_steps and state.epoch < cfg.epochs:
            return self._finish(state, log, t_run, stop=f" (stopped by --max-steps {cfg.max_steps})")
        self.flag = SigintFlag(self.out)
        run = CliRun(self, state, log, self.flag)
        extra = option_callbacks(cfg, self.dist.is_main)
        self.aux_callbacks = fit_run.continued(extra, self.resumed_aux)
        loop = build_loop(self, state, run, extra)
        self.model.train()
        with self.flag.active():
            try:
                loop.run()
            except EvalStopped:
                self.interrupted(state, log)
        return self._finish(
            state, log, t_run, partial=run.partial, stop=stop_note(cfg, run, extra, state.epoch)
        )

    def interrupted(self, state: RunState, log: JsonLog) -> None:
        """Ctrl-C: save, plot, log the ``interrupted`` record, warn; raises
        :class:`Interrupted`."""
        out = self.out
        self.save(state)
        self._plot(state.history)
        saved = self.managed.last if self.managed is not None else self.files.path(state.epoch)
        if self.managed is not None:
            self.managed.wait()  # the interrupted step's file is complete before the exit
        log.write(
            "interrupted",
            step=state.step,
            epoch=state.epoch + 1,
            batch=state.batch,
            checkpoint=saved,
        )
        if saved:
            out.warn(
                f"interrupted at step {state.step}; checkpoint saved to {saved} "
                f"(continue with --resume {saved})"
            )
        else:
            out.warn(f"interrupted at step {state.step}; nothing saved (no --checkpoint given)")
        raise Interrupted(self.flag.exit_status)

    def _last_checkpoint(self) -> str | None:
        if self.managed is not None:
            return self.managed.last
        return self.files.written[-1] if self.files.written else self.cfg.checkpoint

    def _plot(self, history: list) -> None:
        cfg = self.cfg
        path = cfg.plot_path
        if not path or not history:
            return
        if not matplotlib_available():
            if cfg.plot:
                self.out.warn(
                    f"no plot written to {path}: matplotlib is not installed (pip install '.[plot]')"
                )
            return
        try:
            write_plot(path, history, f"{cfg.model} on {cfg.data}")
        except Exception as e:  # a plot is a convenience: never fail the run for it
            self.out.warn(f"could not write the plot {path}: {e}")

    def _finish(
        self, state: RunState, log: JsonLog, t_run: float, partial: dict | None = None, stop: str = ""
    ) -> dict:
        cfg, out = self.cfg, self.out
        if self.managed is not None:
            self.managed.wait()  # a background save is complete (or its error raised) first
        onnx_path = None
        if cfg.export_onnx:
            onnx_path = self.export_onnx(cfg.export_onnx)
        hist = state.history + ([partial] if partial else [])
        self._plot(hist)
        last = hist[-1] if hist else {}
        best = max(
            (r for r in hist if r.get("val_acc") is not None), key=lambda r: r["val_acc"], default=None
        )
        summary = {
            "steps": state.step,
            "epochs": state.epoch,
            "train_time_s": state.train_time,
            "wall_time_s": time.perf_counter() - t_run,
            "final_val_loss": last.get("val_loss"),
            "final_val_acc": last.get("val_acc"),
            "best_val_acc": best["val_acc"] if best else None,
            "best_epoch": best["epoch"] if best else None,
            **(
                {"final_val_mse": last.get("val_mse"), "final_val_mae": last.get("val_mae")}
                if self.target
                else {}
            ),
            "checkpoint": self._last_checkpoint(),
            "onnx": onnx_path,
            "log": cfg.log,
            "plot": cfg.plot_path if cfg.plot_path and hist and matplotlib_available() else None,
        }
        log.write("end", **summary)
        msg = (
            f"done: {_plural(state.step, 'step')}, {_plural(state.epoch, 'epoch')}{stop} "
            f"in {fmt_time(state.train_time)} of training"
        )
        if last.get("val_acc") is not None:
            msg += f"; {self.info.test_split} accuracy {100 * last['val_acc']:.2f}%"
        elif last.get("val_mse") is not None:
            msg += f"; {self.info.test_split} MSE {last['val_mse']:.4g}, MAE {last['val_mae']:.4g}"
            if best and best["val_acc"] > last["val_acc"]:
                msg += f" (best {100 * best['val_acc']:.2f}% after epoch {best['epoch']})"
        out.info(msg)
        for key, label in (
            ("checkpoint", "checkpoint"),
            ("onnx", "ONNX model"),
            ("log", "metrics log"),
            ("plot", "plot"),
        ):
            if summary[key]:
                out.info(f"  {label}: {summary[key]}")
        return summary

    def export_onnx(self, path: str) -> str:
        """Export the model's forward pass (evaluation mode, batch dimension dynamic)."""
        x = placeholder(1, self.info, self.dev)
        prev = self.model.training
        self.model.eval()
        try:
            sonnx.export_model(self.model, path, [x])
        except OSError as e:
            raise CliError(f"cannot write the ONNX file {path}: {e.strerror or e}") from e
        finally:
            self.model.train(prev)
        return path
