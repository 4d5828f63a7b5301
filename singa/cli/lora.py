"""LoRA fine-tuning from the command line: ``--lora SPEC`` trains low-rank adapters
on a frozen model (usually started with ``--init base.zip``); ``singa-train export
CHECKPOINT --merge`` writes the model with the adapters merged into its weights (a
plain model: ``--onnx`` and/or ``--merged`` checkpoint), ``--adapters PATH`` the
adapters alone. ``evaluate``, ``predict`` and ``export`` rebuild the adapters of a
``--lora`` checkpoint from the SPEC its run stored.

SPEC is comma-separated ``key=value`` settings of
:class:`singa.peft.LinearLoraConfig`::

    r=8,alpha=16,target=*linear*            # rank, lora_alpha, a glob of layer names
    r=4,target=conv1,target=*fc*,dropout=0.1,rslora,save=head

``target`` and ``save`` (``modules_to_save``: layers trained in full) may repeat;
``target`` defaults to every Linear. Layers whose states ``--init`` left as initialised
(a new head for another number of classes) are trained in full too (``save``), since a
frozen random head cannot learn.
"""

from __future__ import annotations

from typing import Any

import click

from singa.cli.errors import CliError
from singa.peft import LinearLoraConfig, PeftModel, get_peft_model

__all__ = [
    "LoraSpec",
    "parse_lora_spec",
    "spec_of",
    "lora_options",
    "apply_lora",
    "restore_lora",
    "export_options",
    "export_lora",
]

_NUMBERS = {"r": int, "alpha": float, "dropout": float}
_LISTS = ("target", "save")
_FLAGS = ("rslora",)


def _number(key: str, value: str) -> Any:
    try:
        v = _NUMBERS[key](value)
    except ValueError:
        raise ValueError(f"{key}={value!r} is not a{'n integer' if key == 'r' else ' number'}") from None
    return int(v) if key == "alpha" and float(v).is_integer() else v


def _items(spec: str) -> dict[str, Any]:
    values: dict[str, Any] = {k: [] for k in _LISTS}
    for part in (p.strip() for p in str(spec).split(",")):
        if not part:
            continue
        key, eq, value = part.partition("=")
        key = key.strip().lower()
        if key in _FLAGS and not eq:
            values[key] = True
        elif key in _LISTS and value:
            values[key].append(value.strip())
        elif key in _NUMBERS and value:
            if key in values:
                raise ValueError(f"{key} is given twice")
            values[key] = _number(key, value.strip())
        else:
            known = ", ".join([*_NUMBERS, *_LISTS, *_FLAGS])
            raise ValueError(f"{part!r} is not a LoRA setting (key=value with keys {known}; rslora alone)")
    return values


def parse_lora_spec(spec: str, extra_saved: list[str] | None = None) -> LinearLoraConfig:
    """The :class:`LinearLoraConfig` of a ``--lora`` SPEC (ValueError naming what is
    wrong); ``extra_saved`` adds layers to ``modules_to_save``."""
    v = _items(spec)
    saved = v["save"] + [s for s in extra_saved or [] if s not in v["save"]]
    try:
        return LinearLoraConfig(
            r=v.get("r", 8),
            lora_alpha=v.get("alpha", v.get("r", 8)),
            lora_dropout=v.get("dropout", 0.0),
            target_layers=v["target"] or None,
            use_rslora=v.get("rslora", False),
            modules_to_save=saved or None,
        )
    except (TypeError, ValueError) as e:
        raise ValueError(str(e).replace("LinearLoraConfig: ", "")) from None


class LoraSpec(click.ParamType):
    """A ``--lora`` SPEC, checked when parsed (a usage error naming the bad setting)."""

    name = "spec"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            parse_lora_spec(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)
        return str(value)


def spec_of(config: LinearLoraConfig) -> str:
    """The SPEC of a configuration (what checkpoints store: resuming and exporting
    rebuild the same adapters from it)."""
    parts = [f"r={config.r}", f"alpha={config.lora_alpha}"]
    if config.lora_dropout:
        parts.append(f"dropout={config.lora_dropout}")
    parts += [f"target={t}" for t in config.target_layers or []]
    parts += [f"save={s}" for s in config.modules_to_save or []]
    if config.use_rslora:
        parts.append("rslora")
    return ",".join(parts)


_OPTIONS = [
    click.option(
        "--lora",
        type=LoraSpec(),
        metavar="SPEC",
        help="Train LoRA adapters on the frozen model (start it with --init), e.g. "
        "r=8,alpha=16,target=*linear* (keys r, alpha, dropout, target, save, rslora; "
        "target defaults to every Linear). A resumed run takes it from the checkpoint.",
    ),
]


def lora_options(f: Any) -> Any:
    """Add ``--lora`` and ``--adapters`` to a click command."""
    for option in reversed(_OPTIONS):
        f = option(f)
    return f


def _layers_of(names: list[str], model: Any) -> list[str]:
    """The layers owning the given state names (the innermost one each)."""
    layers = list(model.sublayers())
    owners: list[str] = []
    for n in names:
        best = max((p for p in layers if n.startswith(p + ".")), key=len, default=None)
        if best is not None and best not in owners:
            owners.append(best)
    return owners


def apply_lora(model: Any, cfg: Any, out: Any, left_by_init: list[str] | None = None) -> PeftModel:
    """Inject the adapters of ``cfg.lora`` into ``model`` (compiled; changed in place),
    print what trains, and store the complete SPEC back in ``cfg.lora`` (the layers
    holding ``left_by_init`` states are added as ``save``: they train in full)."""
    saved = _layers_of(left_by_init or [], model)
    try:
        config = parse_lora_spec(cfg.lora, saved)
        pm = get_peft_model(model, config)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--lora'") from e
    cfg.lora = spec_of(config)
    trainable, total = pm.get_nb_trainable_parameters()
    layers = pm.tuner.targeted_layers
    shown = ", ".join(layers[:4]) + (f", ... ({len(layers)} layers)" if len(layers) > 4 else "")
    out.info(f"  lora: {cfg.lora}")
    out.info(
        f"  lora: adapts {shown}; trains {trainable:,} of {total:,} values ({100 * trainable / total:.2f}%)"
    )
    if saved:
        out.info(f"  lora: trained in full (left as initialised by --init): {', '.join(saved)}")
    return pm


def restore_lora(model: Any, stored_config: dict) -> Any:
    """The model a checkpoint's states load into: ``model`` with the adapters its run
    was trained with injected (a :class:`~singa.peft.PeftModel`), or ``model`` itself
    when the run used no ``--lora``."""
    spec = stored_config.get("lora")
    if not spec:
        return model
    return get_peft_model(model, parse_lora_spec(spec))


def export_options(f: Any) -> Any:
    """``singa-train export``'s LoRA options: ``--merge``, ``--adapters``, ``--merged``."""
    f = click.option(
        "--merged",
        "merged_path",
        type=click.Path(dir_okay=False),
        help="With --merge: also write the merged model as a checkpoint (for evaluate, export, --init).",
    )(f)
    f = click.option(
        "--adapters",
        "adapters_path",
        type=click.Path(dir_okay=False),
        help="Write the LoRA adapters alone (with their configuration) to this file.",
    )(f)
    return click.option(
        "--merge",
        is_flag=True,
        help="Merge the LoRA adapters of a --lora checkpoint into the weights: a plain model.",
    )(f)


def export_lora(model: Any, run: dict | None, path: str, opts: dict, out: Any) -> Any:
    """Carry out ``--adapters``, ``--merge`` and ``--merged`` on a loaded checkpoint
    model; returns the model to export (merged and plain with ``--merge``)."""
    from singa.cli.common import RUN_STATE_KEY, check_writable

    if opts.get("merged_path") and not opts.get("merge"):
        raise click.UsageError("--merged writes the merged model: give --merge too")
    wants = opts.get("merge") or opts.get("adapters_path") or opts.get("merged_path")
    if wants and not isinstance(model, PeftModel):
        raise CliError(f"{path} was not trained with --lora: it has no adapters to merge or write")
    if opts.get("adapters_path"):
        info = model.save_adapters(check_writable(opts["adapters_path"], "adapter file"))
        size = f"{info.tensors} tensors, {info.values:,} values, {info.nbytes / 1e3:.1f} KB"
        out(f"adapters: {info.path} ({size})")
    if not opts.get("merge"):
        return model
    plain: Any = model.merge_and_unload()  # the checkpoint's Model subclass
    if opts.get("merged_path"):
        merged_run = dict(run or {})
        merged_run["config"] = {**(merged_run.get("config") or {}), "lora": None}
        target = check_writable(opts["merged_path"], "checkpoint")
        plain.save_states(target, aux_states={RUN_STATE_KEY: merged_run})
        out(f"merged model: {target}")
    return plain
