"""``singa-train MODEL``: a zoo name, ``path/to/file.py:Name`` or ``package.module:Name``.

``Name`` is a :class:`singa.model.Model` subclass or a function returning a Model. It is
called with ``num_classes``, ``num_channels`` and ``image_size`` where its signature
accepts them (by name, or through ``**kwargs``), and with the ``--model-arg key=value``
settings (values read as Python literals, else kept as strings). A file spec is stored
with its absolute path, so a checkpoint's ``evaluate``, ``export``, ``predict`` and
``--resume`` rebuild the model from anywhere. Every failure to get a Model from a spec is
a :class:`ModelSpecError` (a usage error, exit status 2) naming the spec.

Rebuilding a checkpoint's model imports the file or module it names, as typing the spec
would: run only checkpoints of models whose code you trust (or give ``--model``).
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Sequence
from typing import Any

import click

from singa import model as smodel
from singa import zoo

__all__ = ["ModelSpecError", "build_model", "canonical_spec", "is_spec", "parse_model_args"]


class ModelSpecError(click.UsageError):
    """A model spec that cannot be imported or does not give a Model (exit status 2)."""


def is_spec(name: str) -> bool:
    """Whether ``name`` is ``module:Name`` or ``file.py:Name`` rather than a zoo name."""
    return ":" in str(name)


def _split(spec: str) -> tuple[str, str]:
    where, _, attr = str(spec).rpartition(":")
    if not where or not attr or not all(p.isidentifier() for p in attr.split(".")):
        raise ModelSpecError(
            f"model {spec!r}: expected a zoo name, path/to/file.py:Name or package.module:Name"
        )
    return where, attr


def _is_file(where: str) -> bool:
    return where.endswith(".py") or os.sep in where or "/" in where


def canonical_spec(spec: str) -> str:
    """The spec as stored in checkpoints: zoo names lower-cased, file paths absolute.
    Checks that a zoo name exists and that a spec's file or module imports."""
    if not is_spec(spec):
        name = str(spec).strip().lower()
        if name not in zoo.names():
            raise ModelSpecError(
                f"model {spec!r} is not in the zoo ({', '.join(zoo.names())}) and is not "
                "a path/to/file.py:Name or package.module:Name spec"
            )
        return name
    where, attr = _split(spec)
    if _is_file(where):
        where = os.path.abspath(os.path.expanduser(where))
    canonical = f"{where}:{attr}"
    _resolve(canonical)
    return canonical


def _load_module(where: str, spec: str) -> Any:
    if _is_file(where):
        if not os.path.isfile(where):
            raise ModelSpecError(f"model {spec!r}: the file {where} does not exist")
        name = "singa_user_model_" + hashlib.sha256(where.encode()).hexdigest()[:16]
        if name in sys.modules:
            return sys.modules[name]
        module_spec = importlib.util.spec_from_file_location(name, where)
        if module_spec is None or module_spec.loader is None:
            raise ModelSpecError(f"model {spec!r}: {where} cannot be imported as Python")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        try:
            module_spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
        return module
    return importlib.import_module(where)


def _resolve(spec: str) -> Any:
    """The class or function a spec names."""
    where, attr = _split(spec)
    try:
        obj = _load_module(where, spec)
    except ModelSpecError:
        raise
    except Exception as e:  # the user's code failed to import: say which spec and why
        raise ModelSpecError(f"model {spec!r}: cannot import {where}: {type(e).__name__}: {e}") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ModelSpecError(f"model {spec!r}: {where} has no attribute {part!r}")
        obj = getattr(obj, part)
    is_model_class = inspect.isclass(obj) and issubclass(obj, smodel.Model)
    if not is_model_class and (inspect.isclass(obj) or not callable(obj)):
        raise ModelSpecError(
            f"model {spec!r}: {attr} is not a singa.model.Model subclass or a function returning one"
        )
    return obj


def parse_model_args(items: Sequence[str]) -> dict[str, Any]:
    """``["depth=3", "name=wide"]`` -> ``{"depth": 3, "name": "wide"}`` (Python literals,
    else strings). A malformed item is a usage error naming it."""
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, raw = str(item).partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise click.BadParameter(f"{item!r} is not key=value", param_hint="'--model-arg'")
        try:
            out[key] = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            out[key] = raw.strip()
    return out


def _call_args(fn: Any, shape_args: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # no signature: pass only what was asked for
        return dict(extra)
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = {k: v for k, v in shape_args.items() if var_kw or k in params}
    kwargs.update(extra)
    return kwargs


def build_model(spec: str, info: Any, model_args: Sequence[str] = ()) -> smodel.Model:
    """A new model for the dataset described by ``info`` (classes, channels, image size)."""
    extra = parse_model_args(model_args)
    image_size = info.image_size if len(info.image_size) == 2 else None
    shape_args = {
        "num_classes": info.num_classes,
        "num_channels": info.num_channels,
        "image_size": image_size,
    }
    if not is_spec(spec):
        return zoo.create(spec, **shape_args, **extra)
    fn = _resolve(spec)
    try:
        made = fn(**_call_args(fn, shape_args, extra))
    except TypeError as e:
        given = ", ".join(sorted(_call_args(fn, shape_args, extra))) or "no arguments"
        raise ModelSpecError(f"model {spec!r}: calling it with {given} failed: {e}") from e
    if not isinstance(made, smodel.Model):
        raise ModelSpecError(f"model {spec!r} returned a {type(made).__name__}, not a singa.model.Model")
    return made
