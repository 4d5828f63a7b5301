"""``singa-train``: train a zoo model on a dataset, evaluate or export a checkpoint.

::

    singa-train                                   # cnn on fashion-mnist-mini, 5 epochs
    singa-train resnet8 --data cifar10 --epochs 10 --checkpoint ck.zip --log run.jsonl
    singa-train --resume ck.zip                   # continue exactly where ck.zip stopped
    singa-train evaluate ck.zip
    singa-train export ck.zip --onnx model.onnx
    singa-train --list
    singa-train --nproc 2 --checkpoint ck.zip     # 2 data-parallel processes (mpiexec)
    mpiexec -n 4 singa-train --checkpoint ck.zip  # the same, started by mpiexec

Exit status: 0 on success, 1 for a failure (one line on stderr; ``--debug`` shows the
traceback), 2 for a usage error, 130 after Ctrl-C and 143 after SIGTERM or SIGUSR1 (the
checkpoint saved first).
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Sequence
from typing import Any

import click

from singa import __version__, data, zoo
from singa.cli.ckpt_options import ResumeTarget, check_ckpt_options, ckpt_options
from singa.cli.config import OPTIMIZER_DEFAULTS, SCHEDULERS, TrainConfig, config_keys, read_toml
from singa.cli.errors import EXIT_INTERRUPTED, CliError, Interrupted, reported
from singa.cli.fit_options import check_fit_options, fit_options
from singa.cli.generate import generate as generate_command
from singa.cli.lora import export_options, lora_options
from singa.cli.predict import predict as predict_command
from singa.cli.user_options import DataType, ModelType, user_options
from singa.cli.verify_resume import verify_resume as verify_resume_command

__all__ = ["cli", "train", "evaluate", "export", "main"]

_DATASETS = data.available_datasets()
ARGV_KEY = "singa_train.argv"
_CONFIG_FIELDS = set(config_keys())


class _Cli(click.Group):
    """A group whose default command is ``train``: ``singa-train [MODEL] [OPTIONS]``
    trains, ``singa-train evaluate ...`` and ``singa-train export ...`` run the others."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or args[0] not in self.commands:
            args = ["train", *args]
        ctx.meta[ARGV_KEY] = list(args)  # for --nproc, which starts this command again
        return super().parse_args(ctx, args)


class _TrainContext(click.Context):
    @property
    def command_path(self) -> str:
        """``singa-train`` rather than ``singa-train train`` (train is the default)."""
        return self.parent.command_path if self.parent is not None else super().command_path


class _TrainCommand(click.Command):
    context_class = _TrainContext

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        prog = ctx.command_path
        formatter.write(
            f"Usage: {prog} [MODEL] [OPTIONS]\n"
            f"       {prog} evaluate|export|predict|generate CHECKPOINT [OPTIONS]\n"
        )


@click.group("singa-train", cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Train, evaluate and export singa's zoo models (see `singa-train --help`)."""


def _list_and_exit(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    click.echo("models (singa.zoo):")
    for name in zoo.names():
        click.echo(f"  {name:<12} {zoo.describe(name)}")
    click.echo("datasets (singa.data):")
    for name in _DATASETS:
        info = data.dataset_info(name)
        shape = "x".join(map(str, info.sample_shape))
        where = {
            "fashion-mnist-mini": "embedded subset of Fashion-MNIST (8000 train / 2000 val), no download",
            "fashion-mnist": "downloaded, or the Debian package dataset-fashion-mnist",
            "mnist": "downloaded from the canonical mirror",
            "cifar10": "downloaded (binary version)",
            "synthetic": "generated random class templates plus noise (1024 train / 256 test)",
        }.get(name, "")
        click.echo(f"  {name:<19} {info.num_classes} classes, {shape}; {where}")
    click.echo("your own: MODEL as path/to/file.py:Name or package.module:Name (--model-arg k=v);")
    click.echo("  --data imagefolder:DIR (or DIR), npz:FILE, csv:FILE (see README, 'Your own data')")
    click.echo("text (gpt): --data text:FILE, or tinyshakespeare (bundled, public domain; the default)")
    ctx.exit(0)


def _lr_help() -> str:
    by_lr: dict[float, list[str]] = {}
    for k, v in OPTIMIZER_DEFAULTS.items():
        by_lr.setdefault(v[0], []).append(k)
    return ", ".join(f"{lr:g} for {'/'.join(ks)}" for lr, ks in by_lr.items())


def _model_type() -> click.ParamType:
    return ModelType()


class _FiniteFloatRange(click.FloatRange):
    """A float range that also refuses nan and infinities (a usage error naming the option)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


def _data_dir_type() -> click.Path:
    """``--data-dir``: an existing folder (a missing one is a usage error naming it)."""
    return click.Path(exists=True, file_okay=False)


@cli.command(
    "train",
    cls=_TrainCommand,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Also: `singa-train evaluate CHECKPOINT` and `singa-train export CHECKPOINT --onnx PATH` "
    "(see their --help); `singa-train verify-resume [MODEL] [OPTIONS]` checks that a resume is exact. "
    "Exit status: 0 done, 1 failure, 2 usage error, 130 interrupted, 143 stopped by SIGTERM/SIGUSR1.",
)
@click.argument("model", required=False, type=_model_type(), metavar="MODEL")
@click.option(
    "--data",
    type=DataType(),
    help="Dataset name, or your own: imagefolder:DIR (or DIR), npz:FILE, csv:FILE.  "
    "[default: fashion-mnist-mini]",
)
@click.option("--data-dir", type=_data_dir_type(), help="Folder to look for the dataset's files in first.")
@click.option(
    "--download/--no-download", default=True, show_default=True, help="Download missing dataset files."
)
@click.option("--epochs", type=click.IntRange(min=1), default=TrainConfig.epochs, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=TrainConfig.batch_size, show_default=True)
@click.option("--lr", type=_FiniteFloatRange(min=0), help=f"Learning rate.  [default: {_lr_help()}]")
@click.option(
    "--momentum",
    type=_FiniteFloatRange(0, 1, max_open=True),
    help="Momentum (sgd, rmsprop).  [default: 0.9 for sgd, 0 for rmsprop]",
)
@click.option(
    "--weight-decay",
    type=_FiniteFloatRange(min=0),
    help="Weight decay.  [default: 0.01 for adamw, else 0]",
)
@click.option(
    "--optimizer",
    type=click.Choice(list(OPTIMIZER_DEFAULTS), case_sensitive=False),
    default="sgd",
    show_default=True,
)
@click.option(
    "--scheduler",
    type=click.Choice(SCHEDULERS, case_sensitive=False),
    default=TrainConfig.scheduler,
    show_default=True,
    help="Learning-rate schedule over all the epochs' steps (cosine: down to 0 at the end).",
)
@click.option(
    "--warmup", type=click.IntRange(min=0), default=0, show_default=True, help="Linear warm-up steps."
)
@click.option(
    "--graph/--no-graph",
    default=True,
    show_default=True,
    help="Graph mode: trace a step once, then replay it.",
)
@click.option("--sequential", is_flag=True, help="Replay the graph in the recorded order.")
@click.option(
    "--augment",
    is_flag=True,
    help="Augment image batches: random crop of the image zero-padded by 1/8 of its height, "
    "and a random left-right flip (singa.image_tool.augment_batch).",
)
@click.option(
    "--precision",
    type=click.Choice(["float32", "mixed", "float16"], case_sensitive=False),
    default="float32",
    show_default=True,
    help="mixed: float16 compute on float32 master weights with dynamic loss scaling; "
    "float16: pure float16 (SINGA's -p float16).",
)
@click.option(
    "--device", type=click.Choice(["cpu", "gpu"], case_sensitive=False), default="cpu", show_default=True
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the initialisation, dropout and data order.",
)
@click.option(
    "--max-steps",
    type=click.IntRange(min=1),
    help="Stop after this many training steps in all (resumed runs count the earlier ones).",
)
@click.option(
    "--val-steps",
    type=click.IntRange(min=1),
    help="Validate on at most this many batches.  [default: all; with --max-steps, the same "
    "fraction of the validation set as of an epoch trained]",
)
@click.option(
    "--checkpoint",
    type=click.Path(dir_okay=False),
    help="Save a checkpoint here after every epoch, at the end and on Ctrl-C (atomically).",
)
@click.option(
    "--resume",
    type=ResumeTarget(),
    help="Continue the run saved in this checkpoint from its exact step (saving to it unless "
    "--checkpoint is given); a folder or 'auto' (--checkpoint-dir): its newest valid checkpoint, "
    "or a fresh start when it has none.",
)
@click.option(
    "--export-onnx", type=click.Path(dir_okay=False), help="Export the trained model to this ONNX file."
)
@click.option("--log", type=click.Path(dir_okay=False), help="Write metrics here as JSON lines.")
@click.option(
    "--plot",
    type=click.Path(dir_okay=False),
    help="PNG of the loss/accuracy curves (needs matplotlib).  [default: next to --log]",
)
@click.option("--no-plot", is_flag=True, help="Write no plot.")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False),
    help="TOML file with any of these settings (batch-size = 32, ...); the command line wins.",
)
@click.option(
    "--nproc",
    type=click.IntRange(min=1),
    help="Train data-parallel with N local processes, started through mpiexec (pip install '.[dist]'); "
    "--batch-size is per process.",
)
@click.option("-q", "--quiet", is_flag=True, help="Print only errors and warnings.")
@click.option("-v", "--verbose", is_flag=True, help="Print more details.")
@click.option("--debug", is_flag=True, help="Show the traceback of a failure.")
@click.option(
    "--list",
    "list_",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_list_and_exit,
    help="List the models and datasets, then exit.",
)
@click.version_option(__version__, "--version", prog_name="singa-train")
@user_options
@fit_options
@ckpt_options
@lora_options
@click.pass_context
def train(ctx: click.Context, config_file: str | None, nproc: int | None, **opts: Any) -> None:
    """Train MODEL (default: cnn; a zoo name, path/to/file.py:Name or package.module:Name)
    on a dataset, printing a progress bar, a line per epoch (train loss and accuracy,
    validation loss and accuracy, time, samples/s) and a summary."""
    cfg, explicit = _merge_settings(ctx, config_file, opts)
    from singa.cli import lm

    with reported(cfg.debug, cfg.verbose):
        if lm.resumed_text_run(cfg, explicit) or lm.is_lm_run(cfg, explicit):  # gpt on text: singa/cli/lm.py
            if nproc is not None and nproc > 1:
                raise CliError("--nproc is not offered for text runs (singa-train gpt) yet")
            lm.train_lm(cfg, explicit)
            return
    from singa.cli import parallel as dist
    from singa.cli.trainer import Trainer

    if cfg.max_restarts:  # singa/cli/restart.py: the job in child processes, restarted on failure
        from singa.cli.restart import run_single, run_with_restarts

        def launch(args: Sequence[str]) -> int:
            return dist.launch(nproc, list(args)) if nproc is not None and nproc > 1 else run_single(args)

        ctx.exit(run_with_restarts(ctx.meta.get(ARGV_KEY, []), cfg.max_restarts, launch, cfg.log))
    if nproc is not None and nproc > 1:
        ctx.exit(dist.launch(nproc, ctx.meta.get(ARGV_KEY, [])))
    try:
        with reported(cfg.debug, cfg.verbose):
            rank = dist.DistRun()
        with rank.failures(), reported(cfg.debug, cfg.verbose):
            Trainer(cfg, explicit, rank).run()
    except Interrupted as e:
        ctx.exit(e.exit_status)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        ctx.exit(EXIT_INTERRUPTED)


def _merge_settings(ctx: click.Context, config_file: str | None, opts: dict) -> tuple[TrainConfig, set[str]]:
    """Command line over config file over defaults; returns the settings and the
    names given explicitly (either way)."""
    explicit = {k for k in opts if ctx.get_parameter_source(k) == click.core.ParameterSource.COMMANDLINE}
    values = {k: v for k, v in opts.items() if k in explicit}
    if config_file:
        from_file = _config_values(ctx, config_file, skip=explicit)
        values.update(from_file)
        explicit |= set(from_file)
    cfg = _build_config({**{k: v for k, v in opts.items() if v is not None}, **values})
    _check_exclusive(ctx, cfg)
    return cfg, explicit


def _config_values(ctx: click.Context, config_file: str, skip: set[str]) -> dict[str, Any]:
    """The settings of a TOML config file, each converted and checked as its option
    would be (settings in ``skip`` were given on the command line and are left out)."""
    params = {p.name: p for p in ctx.command.params}
    cfg_param = params["config_file"]
    try:
        raw = read_toml(config_file)
    except CliError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=cfg_param) from None
    if not raw:
        raise click.BadParameter(
            f"{config_file} holds no settings (an empty file?)", ctx=ctx, param=cfg_param
        )
    unknown = sorted(k for k in raw if k not in _CONFIG_FIELDS or k in ("config_file", "extra"))
    if unknown:
        raise click.BadParameter(
            f"{config_file}: unknown setting(s) {', '.join(unknown)}; "
            f"known: {', '.join(k.replace('_', '-') for k in sorted(_CONFIG_FIELDS))}",
            ctx=ctx,
            param=cfg_param,
        )
    values = {}
    for key, v in raw.items():
        if key in skip:
            continue
        try:
            values[key] = _config_value(ctx, params.get(key), v)
        except click.BadParameter as e:
            raise click.BadParameter(
                f"{config_file}: {key.replace('_', '-')} = {v!r}: {e.message}", ctx=ctx, param=cfg_param
            ) from None
    return values


def _config_value(ctx: click.Context, param: click.Parameter | None, value: Any) -> Any:
    """A config file's value converted by its option's type (BadParameter if it does not fit)."""
    if param is None:
        raise click.BadParameter("not a setting")
    if isinstance(param, click.Option) and param.is_flag and not isinstance(value, bool):
        raise click.BadParameter(f"{value!r} is not a boolean (true or false)")
    return param.type_cast_value(ctx, value)


def _build_config(merged: dict[str, Any]) -> TrainConfig:
    """A TrainConfig from merged settings (choice values lower-cased)."""
    cfg = TrainConfig()
    for k, v in merged.items():
        if hasattr(cfg, k) and k != "extra":
            if isinstance(v, str) and k in ("optimizer", "scheduler", "device"):
                v = v.lower()
            setattr(cfg, k, v)
    return cfg


def _check_exclusive(ctx: click.Context, cfg: TrainConfig) -> None:
    """Usage error for options that exclude each other."""
    if cfg.quiet and cfg.verbose:
        raise click.UsageError("-q/--quiet and -v/--verbose exclude each other", ctx=ctx)
    if cfg.plot and cfg.no_plot:
        raise click.UsageError("--plot and --no-plot exclude each other", ctx=ctx)
    check_fit_options(ctx, cfg)
    check_ckpt_options(ctx, cfg)


# ----- evaluate and export ---------------------------------------------------------------------------
def _common_checkpoint_options(f: Any) -> Any:
    f = click.option("--debug", is_flag=True, help="Show the traceback of a failure.")(f)
    f = click.option("-v", "--verbose", is_flag=True, help="Print more details.")(f)
    f = click.option(
        "--device", type=click.Choice(["cpu", "gpu"], case_sensitive=False), default="cpu", show_default=True
    )(f)
    f = click.option("--data", type=DataType(), help="Dataset (default: the checkpoint's).")(f)
    f = click.option("--model", "model_name", type=_model_type(), help="Model (default: the checkpoint's).")(
        f
    )
    return f


@cli.command("evaluate", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("checkpoint_path", metavar="CHECKPOINT", type=click.Path(exists=True, dir_okay=False))
@_common_checkpoint_options
@click.option("--data-dir", type=_data_dir_type(), help="Folder to look for the dataset's files in first.")
@click.option("--download/--no-download", default=True, show_default=True)
@click.option(
    "--split",
    type=click.Choice(["test", "train"]),
    default="test",
    show_default=True,
    help="The held-out split (test, or val for fashion-mnist-mini) or the training split.",
)
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the result as a JSON object.")
def evaluate(
    checkpoint_path: str,
    model_name: str | None,
    data: str | None,
    device: str,
    verbose: bool,
    debug: bool,
    data_dir: str | None,
    download: bool,
    split: str,
    batch_size: int,
    as_json: bool,
) -> None:
    """Evaluate the model saved in CHECKPOINT: mean loss and accuracy (a regression:
    MSE and MAE)."""
    from singa.cli.tools import evaluate_checkpoint

    with reported(debug, verbose):
        res = evaluate_checkpoint(
            checkpoint_path, model_name, data, device, data_dir, download, split, batch_size
        )
    if as_json:
        click.echo(json.dumps(res))
    else:
        if "perplexity" in res:  # a text run (singa.cli.lm_tools)
            scores = f"loss {res['loss']:.4f}, perplexity {res['perplexity']:.2f}"
        elif "mse" in res:  # a regression (singa.cli.regression)
            scores = f"loss {res['loss']:.4f}, MSE {res['mse']:.6g}, MAE {res['mae']:.6g}"
        else:
            scores = f"loss {res['loss']:.4f}, accuracy {100 * res['accuracy']:.2f}%"
        click.echo(
            f"{res['model']} on {res['data']} ({res['split']}, {res['samples']} samples): "
            f"{scores} ({res['time_s']:.1f}s)"
        )


@cli.command("export", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("checkpoint_path", metavar="CHECKPOINT", type=click.Path(exists=True, dir_okay=False))
@click.option("--onnx", "onnx_path", type=click.Path(dir_okay=False), help="The ONNX file to write.")
@_common_checkpoint_options
@click.option("--opset", type=click.IntRange(min=1), help="ONNX opset (default: the exporter's).")
@export_options
def export(
    checkpoint_path: str,
    onnx_path: str | None,
    model_name: str | None,
    data: str | None,
    device: str,
    verbose: bool,
    debug: bool,
    opset: int | None,
    **lora: Any,
) -> None:
    """Export the model saved in CHECKPOINT to an ONNX file (dynamic batch size; inputs
    normalised as in training: see the log of the training run); for a --lora run,
    --merge merges the adapters first (a plain model), --adapters writes them alone."""
    from singa.cli.tools import export_checkpoint

    if onnx_path is None and not (lora["adapters_path"] or lora["merged_path"]):
        raise click.UsageError(
            "give --onnx PATH (or, for a --lora checkpoint, --adapters or --merge --merged)"
        )
    t0 = time.perf_counter()
    with reported(debug, verbose):
        res = export_checkpoint(checkpoint_path, onnx_path, model_name, data, device, opset, lora)
    if onnx_path is not None:
        click.echo(
            f"exported {res['model']} ({res['input']} input) from {checkpoint_path} to {onnx_path} "
            f"({time.perf_counter() - t0:.1f}s)"
        )


cli.add_command(predict_command)
cli.add_command(verify_resume_command)
cli.add_command(generate_command)


def main(argv: list[str] | None = None) -> None:
    """The ``singa-train`` entry point."""
    cli.main(args=argv if argv is not None else sys.argv[1:], prog_name="singa-train")


if __name__ == "__main__":  # pragma: no cover
    main()
