"""The exception and the warning of :mod:`singa.checkpoint`."""

from __future__ import annotations

__all__ = ["CheckpointError", "CheckpointWarning"]


class CheckpointError(ValueError):
    """A checkpoint cannot be used: the file is not a checkpoint, is corrupt or
    truncated, was written by a newer format, or does not match the model,
    optimizer or random generator it is loaded into. The message names the file and
    every offending entry."""


class CheckpointWarning(UserWarning):
    """``strict=False`` loading skipped some entries (listed in the message)."""
