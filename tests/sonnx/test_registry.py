"""The ONNX tables: one family module per autograd family, each operator in its family,
and every import handler built from exportable autograd operators."""

import inspect
import warnings

import onnx
import pytest
from onnx import numpy_helper

from singa import device
from singa.autograd.elementwise import Cast
from singa.autograd.engine import Operation
from singa.sonnx import backend, registry
from singa.sonnx.context import UnsupportedOperator
from singa.sonnx.families import shaping as shaping_family
from singa.sonnx.trace import Tracer


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
        if not built:  # values computed when the node runs: shaping's constants and metadata,
            # and the inference-only families (no gradient: integer, index and signal outputs)
            assert family is shaping_family or family in registry.COMPUTING, op_type
            assert handler.__doc__, op_type


def test_tables_are_the_union_of_the_families():
    assert len(registry.EXPORT) == sum(len(f.EXPORT) for f in registry.FAMILIES)
    assert len(registry.IMPORT) == sum(len(f.IMPORT) for f in registry.FAMILIES)
    assert {family_name(f) for f in registry.FAMILIES} >= {
        cls.__module__.rsplit(".", 1)[1] for cls in registry.EXPORT
    }


def _single_node_cases() -> list:
    """The ONNX backend node tests made of one node whose op type we import."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    return [
        c
        for c in cases
        if len(c.model.graph.node) == 1
        and c.model.graph.node[0].op_type in registry.IMPORT
        and c.model.graph.node[0].domain in ("", "ai.onnx")
    ]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_import_handlers_build_only_what_they_declare():
    """Run the single-node ONNX test cases under a recorder: every operator a handler
    builds is one it declares (or a Cast that keeps the node's dtype)."""
    dev = device.get_default_device()
    undeclared: dict[str, set] = {}
    ran = 0
    for case in _single_node_cases():
        op_type = case.model.graph.node[0].op_type
        inputs = [
            numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v for v in case.data_sets[0][0]
        ]
        tracer = Tracer()
        dev.recorder = tracer
        try:
            backend.prepare(case.model, dev).run(inputs)
        except (UnsupportedOperator, TypeError, ValueError):
            continue  # not a case we run (see test_conformance for which and why)
        finally:
            dev.recorder = None
        ran += 1
        if getattr(registry.IMPORT[op_type], "runs_subgraphs", False):
            continue  # If, Loop, Scan: their bodies' handlers build (and declare) the operators
        # (a model older than opset 11 is converted first: Upsample becomes Resize)
        upgraded = [n.op_type for n in backend.upgrade_opset(case.model).graph.node]
        allowed = {c for t in [op_type, *upgraded] for c in registry.IMPORT[t].builds} | {Cast}
        extra = {type(r.op).__name__ for r in tracer.records if type(r.op) not in allowed}
        if extra:
            undeclared.setdefault(op_type, set()).update(extra)
    assert ran > 100
    assert not undeclared, repr(undeclared)
