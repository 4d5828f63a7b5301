"""The export table: ``{Operation subclass: converter}`` merged from the per-family
tables of the ``export_*`` modules. A converter is called as
``convert(ctx, op, in_names, out_names, in_arrays, out_arrays)`` and adds nodes
through the :class:`~singa.sonnx.export.ExportContext` that produce ``out_names``."""

from __future__ import annotations

from singa.sonnx import (
    export_activation,
    export_cast,
    export_elementwise,
    export_linalg,
    export_loss,
    export_nn,
    export_shape,
)

CONVERTERS: dict = {}
for _family in (
    export_elementwise,
    export_linalg,
    export_activation,
    export_shape,
    export_nn,
    export_loss,
    export_cast,
):
    CONVERTERS.update(_family.CONVERTERS)


def register(op_class: type, converter) -> None:
    """Register (or replace) the converter of an Operation subclass."""
    CONVERTERS[op_class] = converter
