"""The default-domain opset of a model, and the conversion of models older than
:data:`MIN_IMPORT_OPSET` by ``onnx.version_converter`` (refusing, by name, a node it
cannot convert, and Scan of opset 8, whose batch axis the converter keeps wrong)."""

from __future__ import annotations

import onnx
from onnx import version_converter

from singa.sonnx.context import UnsupportedOperator

MIN_IMPORT_OPSET = 11


def opset_of(model: onnx.ModelProto) -> int:
    """The model's default-domain opset (MIN_IMPORT_OPSET when it names none)."""
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return MIN_IMPORT_OPSET


def upgrade_opset(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` itself when its default-domain opset is :data:`MIN_IMPORT_OPSET` or newer,
    else a copy converted to that opset by ``onnx.version_converter``.

    Raises UnsupportedOperator naming the first node the converter cannot convert."""
    opset = opset_of(model)
    if opset >= MIN_IMPORT_OPSET:
        return model
    scans = [nd for nd in model.graph.node if nd.op_type == "Scan"]
    if opset < 9 and scans:  # the converter keeps Scan-8's batch axis wrong: refuse, never guess
        nd = scans[0]
        raise UnsupportedOperator(
            f"ONNX import: opset {opset} model: node {nd.name or nd.output[0]!r} (Scan) has opset 8's "
            "batch axis, which is not supported (export the model at opset 9 or newer)"
        )
    try:
        return version_converter.convert_version(model, MIN_IMPORT_OPSET)
    except Exception as e:  # the converter raises RuntimeError, ValueError, IndexError ...
        culprit = _first_unconvertible(model)
        raise UnsupportedOperator(
            f"ONNX import: opset {opset} model cannot be converted to opset {MIN_IMPORT_OPSET}"
            f"{culprit}: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        ) from e


def _first_unconvertible(model: onnx.ModelProto) -> str:
    """`` at node NAME (OpType)``: the first node whose graph prefix fails to convert."""
    g = model.graph
    for i, nd in enumerate(g.node):
        outs = [onnx.helper.make_empty_tensor_value_info(n) for n in nd.output if n]
        part = onnx.helper.make_graph(g.node[: i + 1], g.name, g.input, outs, list(g.initializer))
        m = onnx.helper.make_model(part, opset_imports=list(model.opset_import), ir_version=model.ir_version)
        try:
            version_converter.convert_version(m, MIN_IMPORT_OPSET)
        except Exception:
            return f" at node {nd.name or nd.output[0] or i!r} ({nd.op_type})"
    return ""
