"""Checkpoints: a model's states, its optimizer, its random generator and your own
auxiliary states in one zip file, saved atomically and loaded exactly.

``Model.save_states(fpath, aux_states=None)`` and ``Model.load_states(fpath,
strict=True)`` call :func:`save_model` and :func:`load_model`. The file is a zip
holding ``tensor_dict.npz`` and ``states_attr.json`` laid out as Apache SINGA's
``save_states`` writes them (so its checkpoints load here), plus
``extra_states.json`` (JSON aux states, optimizer scalars, random state) and
``metadata.json`` (format version, singa version, creation time, SHA-256 of every
array). The layout is described in ``docs/checkpoint-format.md``.

Guarantees:

- saving writes a temporary file next to the target, fsyncs it and renames it
  over the target: a crash leaves the old file or the new one, never a broken one;
- loading reads and checks everything (zip structure, checksums, format version,
  names, shapes, dtypes of the model, the optimizer and the random state) before
  changing anything; any problem raises :class:`CheckpointError` (a ``ValueError``)
  naming the file and every offending entry, and leaves everything as it was;
- no pickle: arrays are plain ``.npy`` members, object arrays are rejected, members
  are read in memory and never extracted;
- exact resume: parameters, buffers, optimizer slots and step counts, the
  scheduler position and the device's random generator are restored bit for bit.

``CheckpointManager`` (``manager.py``) keeps numbered checkpoints in a folder (the
last N, the best M by a metric), saving synchronously or in the background;
``save_weights`` / ``load_weights`` (``weights.py``) write and read the model's states
in the safetensors format.

Example::

    model.set_optimizer(opt.SGD(0.1, momentum=0.9))
    model.compile([x], is_train=True, use_graph=True)
    ...
    model.save_states("ckpt.zip", aux_states={"epoch": epoch})
    # later, maybe in another process or on another device:
    aux = model.load_states("ckpt.zip")
    epoch = aux["epoch"]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from singa.checkpoint.errors import CheckpointError, CheckpointWarning
from singa.checkpoint.fileformat.file_reading import read_checkpoint
from singa.checkpoint.fileformat.layout import FORMAT_VERSION
from singa.checkpoint.manager import CheckpointManager, Restored, newest_valid
from singa.checkpoint.states import model_loading, model_saving
from singa.checkpoint.states.info import ArrayInfo, CheckpointInfo, describe
from singa.checkpoint.states.model_loading import AuxStates, LoadReport
from singa.checkpoint.states.protocols import HasStates
from singa.checkpoint.weights import load_weights, read_weights, save_weights
from singa.tensor import Tensor

__all__ = [
    "CheckpointError",
    "CheckpointWarning",
    "LoadReport",
    "AuxStates",
    "ArrayInfo",
    "CheckpointInfo",
    "HasStates",
    "FORMAT_VERSION",
    "save_model",
    "load_model",
    "save_layer",
    "load_layer",
    "save_optimizer",
    "load_optimizer",
    "read",
    "read_arrays",
    "CheckpointManager",
    "Restored",
    "newest_valid",
    "save_weights",
    "load_weights",
    "read_weights",
]


# ----- public API ----------------------------------------------------------------------------------
def save_model(
    model: HasStates, fpath: Any, aux_states: Mapping | None = None, *, compress: bool = False
) -> str:
    """Save ``model``'s states, its optimizer's states (when ``set_optimizer`` was
    used), the random state of its device, and ``aux_states`` to the zip ``fpath``
    (overwritten atomically). ``aux_states`` values may be Tensors, numpy arrays,
    numpy scalars or JSON values (None, bools, ints, floats, strings, lists, dicts
    with string keys). ``compress=True`` deflates the arrays (slower, smaller).
    Returns the path written."""
    opt = getattr(model, "optimizer", None)
    return model_saving.save(
        fpath,
        layer=model,
        optimizer=opt,
        params=None,
        aux_states=aux_states,
        with_rng=True,
        compress=compress,
    )


def load_model(model: HasStates, fpath: Any, strict: bool = True) -> AuxStates:
    """Restore what :func:`save_model` wrote (or an Apache SINGA checkpoint) into
    ``model``, its optimizer and its device's random generator; returns the
    ``aux_states`` dict (Tensors on the model's device, arrays, JSON values).

    Everything is validated first; with ``strict=True`` any problem raises
    :class:`CheckpointError` and nothing changes. With ``strict=False`` what matches
    is loaded, the rest is listed in the result's ``.report`` and in a
    :class:`CheckpointWarning`. Values are copied in place into the existing arrays
    (graph traces stay valid). Parameters that a not-yet-compiled model creates
    lazily are filled in when they are created (before their first use)."""
    return model_loading.load(
        fpath, layer=model, optimizer="model", params=None, strict=strict, with_rng=True
    )


def save_layer(
    layer: HasStates, fpath: Any, aux_states: Mapping | None = None, *, compress: bool = False
) -> str:
    """Save a layer's parameters and buffers (no optimizer, no random state)."""
    return model_saving.save(
        fpath,
        layer=layer,
        optimizer=None,
        params=None,
        aux_states=aux_states,
        with_rng=False,
        compress=compress,
    )


def load_layer(layer: HasStates, fpath: Any, strict: bool = True) -> AuxStates:
    """Load parameters and buffers into a layer (see :func:`load_model`); optimizer
    and random states in the file are ignored."""
    return model_loading.load(fpath, layer=layer, optimizer=None, params=None, strict=strict, with_rng=False)


def save_optimizer(
    optimizer: Any,
    fpath: Any,
    params: Mapping[str, Tensor],
    aux_states: Mapping | None = None,
    *,
    compress: bool = False,
) -> str:
    """Save an optimizer's states on their own; ``params`` names the parameters it
    updates (e.g. ``model.get_params()``)."""
    return model_saving.save(
        fpath,
        layer=None,
        optimizer=optimizer,
        params=params,
        aux_states=aux_states,
        with_rng=False,
        compress=compress,
    )


def load_optimizer(
    optimizer: Any, fpath: Any, params: Mapping[str, Tensor], strict: bool = True
) -> AuxStates:
    """Restore an optimizer's states saved by :func:`save_optimizer` or
    :func:`save_model`; ``params`` maps names to the parameters it updates."""
    return model_loading.load(
        fpath, layer=None, optimizer=optimizer, params=params, strict=strict, with_rng=False
    )


def read(fpath: Any, verify: bool = False) -> CheckpointInfo:
    """Describe a checkpoint without a model: names, shapes and dtypes of the stored
    arrays, JSON aux values, optimizer scalars, random state and metadata. The file's
    structure is always checked; ``verify=True`` also reads every array and checks
    its SHA-256. Raises :class:`CheckpointError` for a bad file."""
    return describe(read_checkpoint(fpath, load=verify))


def read_arrays(fpath: Any) -> dict[str, np.ndarray]:
    """Every stored array by key (model states by name, aux arrays by their key,
    optimizer slots as ``optimizer/<param>/<slot>``), verified against its SHA-256."""
    return dict(read_checkpoint(fpath, load=True).values)
