"""The ONNX tables: one family module per autograd family, each operator in its family,
and every import handler built from exportable autograd operators."""

import inspect

import pytest

from singa.autograd.engine import Operation
from singa.sonnx import registry
from singa.sonnx.families import shape as shape_family


def family_name(module) -> str:
    return module.__name__.rsplit(".", 1)[1]


@pytest.mark.parametrize("family", registry.FAMILIES, ids=family_name)
def test_export_entries_are_operators_of_the_family(family):
    wrong = [
        cls.__qualname__
        for cls in family.EXPORT
        if not (inspect.isclass(cls) and issubclass(cls, Operation))
        or cls.__module__ != f"singa.autograd.{family_name(family)}"
    ]
    assert not wrong


@pytest.mark.parametrize("family", registry.FAMILIES, ids=family_name)
def test_every_import_handler_builds_exportable_autograd_operators(family):
    for op_type, handler in family.IMPORT.items():
        built = getattr(handler, "builds", None)
        assert built is not None, f"{op_type}: the handler does not declare what it builds"
        for cls in built:
            assert inspect.isclass(cls) and issubclass(cls, Operation), (op_type, cls)
            assert cls.__module__.startswith("singa.autograd."), (op_type, cls)
            assert cls in registry.EXPORT, f"{op_type} builds {cls.__name__}, which has no ONNX converter"
        if not built:  # values computed when the node runs: only shape's constants and metadata
            assert family is shape_family, op_type
            assert handler.__doc__, op_type


def test_tables_are_the_union_of_the_families():
    assert len(registry.EXPORT) == sum(len(f.EXPORT) for f in registry.FAMILIES)
    assert len(registry.IMPORT) == sum(len(f.IMPORT) for f in registry.FAMILIES)
    assert {family_name(f) for f in registry.FAMILIES} >= {
        cls.__module__.rsplit(".", 1)[1] for cls in registry.EXPORT
    }
