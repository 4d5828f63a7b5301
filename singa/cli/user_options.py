"""``singa-train``'s options for your own model and data, and the hooks the training run
calls: the ``MODEL`` and ``--data`` types, ``--model-arg``, the data options
(``--val-split``, ``--channels``, ``--image-size``, ``--target``, ``--task``,
``--skip-bad``, ``--workers``) and fine-tuning (``--init``, ``--freeze``)."""

from __future__ import annotations

import os
from typing import Any

import click
import numpy as np

from singa import data
from singa.cli import lm
from singa.cli.errors import CliError
from singa.cli.model_spec import ModelSpecError, canonical_spec

__all__ = [
    "ModelType",
    "DataType",
    "user_options",
    "data_options",
    "stored_data_options",
    "train_stats",
    "report_skipped",
    "fine_tune",
    "parse_image_size",
    "RESUMED_USER_SETTINGS",
]

#: settings a resumed run takes from its checkpoint unless given again
RESUMED_USER_SETTINGS = (
    "model_args",
    "val_split",
    "channels",
    "image_size",
    "target",
    "task",
    "skip_bad",
    "freeze",
    "lora",
)


class ModelType(click.ParamType):
    """A zoo name (any case) or a ``file.py:Name`` / ``module:Name`` spec, checked
    (imported) at once; converted to the canonical spec."""

    name = "model"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return canonical_spec(str(value))
        except ModelSpecError as e:
            self.fail(e.message, param, ctx)


class DataType(click.ParamType):
    """A registered dataset name (any case) or a user-data spec (``imagefolder:DIR`` or a
    folder, ``npz:FILE``, ``csv:FILE``), converted to a canonical name or an absolute spec."""

    name = "data"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value)
        try:
            as_text = lm.text_spec(text)  # text:FILE or the bundled text (gpt)
        except CliError as e:
            self.fail(str(e), param, ctx)
        if as_text is not None:
            return as_text
        if text.strip().lower() in data.available_datasets():
            return text.strip().lower()
        parsed = data.parse_data_spec(text)
        if parsed is None:
            self.fail(
                f"{text!r} is neither a dataset ({', '.join(data.available_datasets())}) nor "
                "imagefolder:DIR, npz:FILE or csv:FILE",
                param,
                ctx,
            )
        kind, path = parsed
        exists = os.path.isdir(path) if kind == "imagefolder" else os.path.isfile(path)
        if not exists:
            what = "folder" if kind == "imagefolder" else f"{kind} file"
            self.fail(f"{text!r}: no such {what} {path}", param, ctx)
        return f"{kind}:{os.path.abspath(path)}"


def parse_image_size(value: Any) -> tuple[int, int] | None:
    """``32`` or ``"32"`` -> (32, 32); ``"24x32"`` -> (24, 32); None stays None."""
    if value is None:
        return None
    parts = str(value).lower().replace(",", "x").split("x")
    try:
        sizes = [int(p) for p in parts]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not N or HxW", param_hint="'--image-size'") from None
    if len(sizes) == 1:
        sizes *= 2
    if len(sizes) != 2 or min(sizes) < 1:
        raise click.BadParameter(f"{value!r} is not N or HxW (positive)", param_hint="'--image-size'")
    return sizes[0], sizes[1]


def _check_image_size(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    parse_image_size(value)
    return value


def _as_list(ctx: click.Context, param: click.Parameter, value: Any) -> list:
    """Repeated options as lists (as they come back from a checkpoint's JSON)."""
    return list(value or ())


_OPTIONS = [
    click.option(
        "--model-arg",
        "model_args",
        multiple=True,
        callback=_as_list,
        metavar="KEY=VALUE",
        help="Argument of the model's constructor or function (repeatable; Python literals, else strings).",
    ),
    click.option(
        "--val-split",
        type=click.FloatRange(0, 1, max_open=True),
        default=0.1,
        show_default=True,
        help="Validation fraction drawn per class with --seed, for data without a validation split.",
    ),
    click.option(
        "--channels",
        type=click.Choice(["1", "3"]),
        help="Image channels: 1 (grayscale) or 3 (RGB).  [default: the first image's]",
    ),
    click.option(
        "--image-size",
        callback=_check_image_size,
        metavar="N|HxW",
        help="Resize images to this size.  [default: the first image's]",
    ),
    click.option("--target", help="The label column of a CSV file (name or position).  [default: the last]"),
    click.option(
        "--task",
        type=click.Choice(["classification", "regression"]),
        default="classification",
        show_default=True,
        help="What a CSV target is.",
    ),
    click.option("--skip-bad", is_flag=True, help="Skip (and count) unreadable images instead of failing."),
    click.option(
        "--workers",
        type=click.IntRange(min=0),
        default=0,
        show_default=True,
        help="Processes decoding batches in parallel (the batches do not depend on it).",
    ),
    click.option(
        "--init",
        type=click.Path(exists=True, dir_okay=False),
        help="Start from the parameters of this checkpoint zip, ONNX or safetensors file "
        "whose names and shapes match (the others keep their initialisation; all are listed).",
    ),
    click.option(
        "--freeze",
        multiple=True,
        callback=_as_list,
        metavar="PATTERN",
        help="Do not train the parameters whose names match this glob (repeatable; 'features' "
        "covers features.*).",
    ),
]


def user_options(f: Any) -> Any:
    """Add the options above to a click command."""
    for option in reversed(_OPTIONS):
        f = option(f)
    return f


def data_options(cfg: Any) -> dict[str, Any]:
    """The keyword arguments of :func:`singa.data.load_user_data` from the settings."""
    parsed = data.parse_data_spec(cfg.data)
    if cfg.task == "regression" and (parsed is None or parsed[0] != "csv"):
        raise click.UsageError(
            f"--task regression needs --data csv:FILE (a numeric target column), not {cfg.data}"
        )
    channels = cfg.channels
    return {
        "val_split": float(cfg.val_split),
        "seed": int(cfg.seed),
        "channels": None if channels is None else int(channels),
        "image_size": parse_image_size(cfg.image_size),
        "target": cfg.target,
        "task": cfg.task,
        "skip_bad": bool(cfg.skip_bad),
        "workers": int(cfg.workers),
    }


def stored_data_options(run: dict | None, info: Any, whole: bool = False) -> dict[str, Any]:
    """:func:`data_options` of the run kept in a checkpoint, with the stored channels
    and image size (so the data is read as the model was trained on it). ``whole``: other
    data than the run's, read entirely (no validation split) with the model's classes."""
    cfg = dict((run or {}).get("config") or {})
    shape = tuple(info.image_size)
    extra = {"class_names": tuple(info.class_names)} if whole else {}
    return {
        **extra,
        "val_split": 0.0 if whole else float(cfg.get("val_split", 0.1)),
        "seed": int(cfg.get("seed", 0)),
        "channels": int(info.num_channels) if len(shape) == 2 and info.num_channels in (1, 3) else None,
        "image_size": shape if len(shape) == 2 else None,
        "target": cfg.get("target"),
        "task": cfg.get("task", "classification"),
        "skip_bad": bool(cfg.get("skip_bad", False)),
        "workers": int(cfg.get("workers", 0)),
        "stats": not (run or {}).get("normalization"),
    }


def train_stats(ds: Any) -> tuple[np.ndarray, np.ndarray]:
    """The normalisation of the training split: user data's own, else computed."""
    if isinstance(ds, data.UserData):
        return ds.mean, ds.std
    return data.channel_mean_std(ds.x_train)


def report_skipped(ds: Any, warn: Any) -> None:
    """Warn about the unreadable files ``--skip-bad`` left out."""
    skipped = ds.skipped if isinstance(ds, data.UserData) else []
    if skipped:
        more = f" (first: {skipped[0]})"
        warn(f"skipped {len(skipped)} unreadable image{'s' if len(skipped) > 1 else ''}{more}")


def fine_tune(model: Any, cfg: Any, out: Any, resuming: bool) -> None:
    """Apply ``--init`` (not when resuming: the checkpoint's values win), ``--freeze``
    and ``--lora`` (:mod:`singa.cli.lora`; the model is changed in place)."""
    from singa.cli.init_weights import load_matching

    report = None
    if cfg.init and not resuming:
        try:
            report = load_matching(model, cfg.init)
        except (OSError, ValueError) as e:
            raise CliError(f"--init {cfg.init}: {str(e).splitlines()[0]}") from e
        out.info(report.summary())
        for line in report.details():
            out.info("    " + line)
    if cfg.freeze:
        try:
            names = model.freeze(*cfg.freeze)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="'--freeze'") from e
        total = len(model.get_params())
        out.info(f"  frozen: {len(names)} of {total} parameter tensors ({', '.join(cfg.freeze)})")
    if getattr(cfg, "lora", None):
        from singa.cli.lora import apply_lora

        apply_lora(model, cfg, out, [s.split(" ")[0] for s in report.left] if report else None)
