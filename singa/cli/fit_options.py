"""The training options that come with fit's callbacks: ``--early-stop``, ``--keep``, ``--ema``,
``--tensorboard``, ``--accumulate``, ``--summary`` and ``--time-budget`` (added to the
train command by :func:`fit_options`)."""

from __future__ import annotations

from typing import Any

import click

from singa.callbacks import parse_duration

__all__ = ["fit_options", "check_fit_options", "RESUMED_FIT_SETTINGS", "Duration"]

#: the settings of these that a resumed run takes from its checkpoint unless given again
RESUMED_FIT_SETTINGS = ("accumulate", "early_stop", "ema")


class Duration(click.ParamType):
    """``90s``, ``10m``, ``1h30m`` or a number of seconds (a usage error otherwise)."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The duration in seconds."""
        try:
            return parse_duration(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


_OPTIONS = [
    click.option(
        "--early-stop",
        type=click.IntRange(min=0),
        metavar="PATIENCE",
        help="Stop when the validation loss has not improved for PATIENCE epochs "
        "(singa.callbacks.EarlyStopping).",
    ),
    click.option(
        "--keep",
        type=click.IntRange(min=1),
        metavar="N",
        help="With a --checkpoint path holding {epoch} (ck-{epoch}.zip) or a --checkpoint-dir: "
        "keep only the N newest files.",
    ),
    click.option(
        "--tensorboard",
        type=click.Path(file_okay=False),
        metavar="DIR",
        help="Write TensorBoard event files here: loss, accuracy, learning rate, samples/s per epoch "
        "(needs tensorboardX: pip install '.[tensorboard]').",
    ),
    click.option(
        "--accumulate",
        type=click.IntRange(min=1),
        default=1,
        show_default=True,
        metavar="K",
        help="One optimizer update from the summed gradients of K batches (the update of a batch "
        "K times larger for models without BatchNorm).",
    ),
    click.option("--summary", is_flag=True, help="Print the model's layers, shapes and parameters first."),
    click.option(
        "--ema",
        type=click.FloatRange(min=0, max=1, max_open=True),
        metavar="DECAY",
        help="Keep an exponential moving average of the weights (singa.callbacks.EMA): validation "
        "runs on it, checkpoints store it, and the model ends with it.",
    ),
    click.option(
        "--time-budget",
        type=Duration(),
        metavar="TIME",
        help="End training after TIME (90s, 10m, 1h30m) with the learning-rate schedule fitted to it.",
    ),
]


def fit_options(f: Any) -> Any:
    """Add the options above to a click command."""
    for option in reversed(_OPTIONS):
        f = option(f)
    return f


def check_fit_options(ctx: click.Context, cfg: Any) -> None:
    """Usage errors of these options' combinations."""
    folder = getattr(cfg, "checkpoint_dir", None)  # --checkpoint-dir keeps --keep files too
    if cfg.keep is not None and "{epoch}" not in (cfg.checkpoint or "") and not folder:
        raise click.UsageError(
            "--keep needs a --checkpoint path with {epoch} in it (e.g. --checkpoint ck-{epoch}.zip) "
            "or a --checkpoint-dir",
            ctx=ctx,
        )
    if cfg.accumulate > 1 and cfg.precision == "mixed":
        raise click.UsageError("--accumulate does not work with --precision mixed yet", ctx=ctx)
    if cfg.tensorboard:
        try:
            import tensorboardX  # noqa: F401
        except ImportError:
            raise click.UsageError(
                "--tensorboard needs tensorboardX, which is not installed: pip install '.[tensorboard]'",
                ctx=ctx,
            ) from None
