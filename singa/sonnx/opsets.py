"""The default-domain opset of a model, and the conversion of models older than
:data:`MIN_IMPORT_OPSET` by ``onnx.version_converter`` (refusing, by name, a node it
cannot convert). Scan nodes of opset 8 keep their meaning (a batch axis before the
sequence axis, ``sequence_lens``): they move to :data:`OPSET8_DOMAIN`, whose Scan the
``control`` family imports, and only their bodies are converted."""

from __future__ import annotations

import onnx
from onnx import version_converter

from singa.sonnx.context import UnsupportedOperator

MIN_IMPORT_OPSET = 11

#: the domain of the Scan nodes of opset-8 models once converted: they keep opset 8's
#: meaning (batch axis 0, sequence axis 1, ``sequence_lens``), which opset 9 changed
OPSET8_DOMAIN = "singa.opset8"


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
    if opset < 9 and any(nd.op_type == "Scan" and nd.domain in ("", "ai.onnx") for nd in model.graph.node):
        model = _set_aside_scans(model, opset)
    try:
        return version_converter.convert_version(model, MIN_IMPORT_OPSET)
    except Exception as e:  # the converter raises RuntimeError, ValueError, IndexError ...
        culprit = _first_unconvertible(model)
        raise UnsupportedOperator(
            f"ONNX import: opset {opset} model cannot be converted to opset {MIN_IMPORT_OPSET}"
            f"{culprit}: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        ) from e


def _set_aside_scans(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """A copy of an opset-8 model whose Scan nodes move to :data:`OPSET8_DOMAIN`, which
    the converter passes through (its Scan adapter would drop ``sequence_lens`` and keep
    the batch axis), with their bodies converted on their own."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for nd in out.graph.node:
        if nd.op_type != "Scan" or nd.domain not in ("", "ai.onnx"):
            continue
        nd.domain = OPSET8_DOMAIN
        for a in nd.attribute:
            if a.name == "body":
                body = onnx.helper.make_model(a.g, opset_imports=[onnx.helper.make_opsetid("", opset)])
                try:
                    a.g.CopyFrom(version_converter.convert_version(body, MIN_IMPORT_OPSET).graph)
                except Exception as e:
                    raise UnsupportedOperator(
                        f"ONNX import: opset {opset} model: the body of node {nd.name or nd.output[0]!r} "
                        f"(Scan) cannot be converted to opset {MIN_IMPORT_OPSET}: {str(e).splitlines()[0]}"
                    ) from e
    out.opset_import.append(onnx.helper.make_opsetid(OPSET8_DOMAIN, 1))
    return out


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
