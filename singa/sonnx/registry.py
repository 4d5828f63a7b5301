"""The ONNX tables: the export table ``{Operation subclass: converter}`` and the import
table ``{ONNX op type: handler}``, merged from the family modules of
:mod:`singa.sonnx.families` (listed once, by the imports of ``families/__init__.py``).
The exporter and the backend read these tables and nothing else of the families."""

from __future__ import annotations

from collections.abc import Callable

from singa.sonnx.families import (
    FAMILIES,
    control,
    detection,
    dropout,
    image,
    ml,
    preview,
    quantize,
    sequence,
    signal,
    sorting,
    text,
    training,
)

#: families with handlers that compute their values when the node runs (inference-only
#: operators: integer, index, random, decoded, string or data-dependent outputs without a
#: gradient; the sequence and optional operators, which pass tensors through), besides shaping
COMPUTING = (sorting, quantize, control, signal, detection, dropout, sequence, image, text)


def _merge(tables: list[dict], what: str) -> dict:
    merged: dict = {}
    for table in tables:
        for key, value in table.items():
            if key in merged:
                raise RuntimeError(f"ONNX registry: {key!r} has two {what}")
            merged[key] = value
    return merged


EXPORT: dict[type, Callable] = _merge([f.EXPORT for f in FAMILIES], "converters")
IMPORT: dict[str, Callable] = _merge([f.IMPORT for f in FAMILIES], "import handlers")

#: the import tables of the other operator domains read, ``{domain: {op_type: handler}}``
#: (their families' ``DOMAIN_IMPORT``; control's is opset 8's Scan, see ``opsets``)
DOMAIN_IMPORT: dict[str, dict[str, Callable]] = {
    f.DOMAIN: dict(f.DOMAIN_IMPORT) for f in (control, ml, preview, training)
}


def register_export(op_class: type, converter: Callable) -> None:
    """Register (or replace) the ONNX converter of an Operation subclass (an operator of
    your own)."""
    EXPORT[op_class] = converter


def register_import(op_type: str, handler: Callable) -> None:
    """Register (or replace) the import handler of an ONNX op type (default domain)."""
    IMPORT[op_type] = handler
