"""Adapter-only checkpoints: the LoRA tensors (and ``modules_to_save`` states) with
the configuration, in the checkpoint zip format of :mod:`singa.checkpoint`
(written atomically, every entry validated and checksummed on load, no pickle).

The arrays are the model states of the file, named as in the adapted base model
(``linear1.lora_A``, ``blocks.0.fc.lora_B``); the JSON aux value ``singa_peft`` holds
``{"format": 1, "config": {...}, "layers": [...], "saved": [...]}`` (the
configuration, the adapted layers and the ``modules_to_save`` layers). Loading checks,
before anything changes, that the file is an adapter file, that its configuration
(method, ``r``, ``lora_alpha``, ``use_rslora``) and its layers are the model's, and
that every tensor's name, shape and dtype fit; any problem raises
:class:`~singa.checkpoint.CheckpointError` naming the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from singa import checkpoint
from singa.checkpoint import CheckpointError
from singa.layer.base import Layer
from singa.peft.config import PeftConfig
from singa.peft.registry import PeftRegistry
from singa.tensor import Tensor

__all__ = ["ADAPTER_FORMAT", "AUX_KEY", "SavedAdapters", "save_adapters", "load_adapters", "read_config"]

#: the version of the adapter description stored in the file
ADAPTER_FORMAT = 1
#: the aux-state key holding the description
AUX_KEY = "singa_peft"
#: configuration entries that must be equal to load adapters (dropout may differ)
_MUST_MATCH = ("peft_type", "r", "lora_alpha", "use_rslora")


@dataclass(frozen=True)
class SavedAdapters:
    """What :func:`save_adapters` wrote: the path, the file's size in bytes, the
    number of tensors and of values in them."""

    path: str
    nbytes: int
    tensors: int
    values: int


class AdapterStates(Layer):
    """A layer whose states are the given tensors under the given names (what the
    checkpoint functions save and load for an adapter file)."""

    def __init__(self, tensors: dict[str, Tensor]):
        super().__init__()
        self._tensors = dict(tensors)

    def get_states(self) -> dict[str, Tensor]:
        """The tensors by name."""
        return dict(self._tensors)

    def get_params(self) -> dict[str, Tensor]:
        """The trainable ones."""
        return {n: t for n, t in self._tensors.items() if t.stores_grad}


def save_adapters(tuner: Any, base_model: Layer, path: Any, *, compress: bool = False) -> SavedAdapters:
    """Write the adapters ``tuner`` injected into ``base_model`` to ``path``."""
    states = tuner.adapter_states(base_model)
    meta = {"format": ADAPTER_FORMAT, **tuner.describe()}
    written = checkpoint.save_layer(AdapterStates(states), path, {AUX_KEY: meta}, compress=compress)
    values = sum(t.size() for t in states.values())
    return SavedAdapters(str(written), os.path.getsize(written), len(states), values)


def _description(path: Any) -> dict:
    """The validated ``singa_peft`` description of an adapter file."""
    info = checkpoint.read(path)
    meta = info.aux_values.get(AUX_KEY)
    label = repr(str(path))
    if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict):
        raise CheckpointError(
            f"{label}: not an adapter file (no {AUX_KEY!r} description; a full checkpoint?)"
        )
    if meta.get("format") != ADAPTER_FORMAT:
        raise CheckpointError(f"{label}: adapter format {meta.get('format')!r} is not {ADAPTER_FORMAT}")
    for key in ("layers", "saved"):
        if not isinstance(meta.get(key), list) or not all(isinstance(p, str) for p in meta[key]):
            raise CheckpointError(f"{label}: the adapter description's {key!r} is not a list of names")
    return meta


def read_config(path: Any) -> PeftConfig:
    """The configuration stored in an adapter file."""
    config = _description(path)["config"]
    try:
        cls = PeftRegistry.get_tuner(config.get("peft_type")).config_class
        return cls.from_dict(config)
    except ValueError as e:
        raise CheckpointError(f"{str(path)!r}: bad adapter configuration: {e}") from None


def _mismatches(meta: dict, tuner: Any) -> list[str]:
    mine = tuner.describe()
    problems = [
        f"{k} is {meta['config'].get(k)!r} in the file, {mine['config'].get(k)!r} in the model"
        for k in _MUST_MATCH
        if meta["config"].get(k) != mine["config"].get(k)
    ]
    for key, what in (("layers", "adapted layers"), ("saved", "modules_to_save layers")):
        if meta[key] != mine[key]:
            problems.append(f"{what}: file {meta[key]}, model {mine[key]}")
    return problems


def load_adapters(tuner: Any, base_model: Layer, path: Any) -> None:
    """Load an adapter file into the adapters ``tuner`` injected into
    ``base_model`` (which must not be merged)."""
    meta = _description(path)
    problems = _mismatches(meta, tuner)
    if problems:
        raise CheckpointError(f"{str(path)!r}: the adapters do not fit the model: " + "; ".join(problems))
    merged = [p for p, lora in tuner.lora_layers(base_model).items() if lora.merged]
    if merged:
        raise ValueError(f"load_adapters: {', '.join(merged)} are merged; merge_weights(False) first")
    checkpoint.load_layer(AdapterStates(tuner.adapter_states(base_model)), path, strict=True)
