"""The checkpoint functions under their earlier name: :mod:`singa.checkpoint` is where
they live (a floor below the model); ``from singa.model import checkpoint`` keeps
working for existing code."""

from singa.checkpoint import (
    FORMAT_VERSION,
    ArrayInfo,
    AuxStates,
    CheckpointError,
    CheckpointInfo,
    CheckpointWarning,
    LoadReport,
    load_layer,
    load_model,
    load_optimizer,
    read,
    read_arrays,
    save_layer,
    save_model,
    save_optimizer,
)

__all__ = [
    "CheckpointError",
    "CheckpointWarning",
    "LoadReport",
    "AuxStates",
    "ArrayInfo",
    "CheckpointInfo",
    "FORMAT_VERSION",
    "save_model",
    "load_model",
    "save_layer",
    "load_layer",
    "save_optimizer",
    "load_optimizer",
    "read",
    "read_arrays",
]
