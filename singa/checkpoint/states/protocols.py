"""What the checkpoint functions need of the objects they save and restore."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from singa.tensor import Tensor


@runtime_checkable
class HasStates(Protocol):
    """Something whose states a checkpoint holds (a :class:`~singa.layer.Layer`, a
    :class:`~singa.model.Model`): its parameters and buffers by dotted name, whose
    arrays loading fills in place."""

    def get_states(self) -> dict[str, Tensor]:
        """The parameters and buffers by dotted name."""
        ...
