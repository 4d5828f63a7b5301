"""docs/onnx.md lists exactly the operators the importer supports, and the opsets."""

from __future__ import annotations

import pathlib
import re

from singa.sonnx import backend

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "onnx.md"


def _listed_operators() -> list[str]:
    text = DOC.read_text()
    start = text.index("- Supported operators (default domain")
    block = text[text.index("\n\n", start) : text.index("(`sonnx.supported_ops()`)", start)]
    return [w for w in re.split(r"[,\s]+", block) if w]


def test_docs_list_the_supported_operators():
    want = ", ".join(backend.supported_ops())
    assert _listed_operators() == backend.supported_ops(), f"docs/onnx.md should list: {want}"


def test_docs_give_the_oldest_opset():
    assert "opset 7 and newer" in DOC.read_text()
    assert backend.MIN_IMPORT_OPSET == 11  # what version_converter targets, as the docs say
