"""docs/onnx.md lists exactly the operators the importer supports, and the opsets.

``python tests/sonnx/test_docs_onnx.py`` rewrites the list from ``supported_ops()``."""

from __future__ import annotations

import pathlib
import re
import textwrap

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


def test_docs_list_the_operators_of_other_domains():
    text = " ".join(DOC.read_text().split())
    for domain in backend.supported_domains():
        listed = f"{domain}: {', '.join(backend.supported_ops(domain))} ("
        assert listed in text, f"docs/onnx.md should list {listed!r}"


def test_docs_give_the_oldest_opset():
    assert "opset 7 and newer" in DOC.read_text()
    assert backend.MIN_IMPORT_OPSET == 11  # what version_converter targets, as the docs say


def rewrite() -> None:
    """Write the supported operators into docs/onnx.md."""
    text = DOC.read_text()
    start = text.index("\n\n", text.index("- Supported operators (default domain")) + 2
    end = text.index("(`sonnx.supported_ops()`).", start) + len("(`sonnx.supported_ops()`).")
    words = ", ".join(backend.supported_ops()) + " (`sonnx.supported_ops()`)."
    block = textwrap.fill(words, 90, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False)
    DOC.write_text(text[:start] + block + text[end:])


if __name__ == "__main__":
    import importlib
    import sys

    sys.path.insert(0, str(DOC.parents[1]))  # this checkout's singa, not an installed one
    for name in [m for m in sys.modules if m == "singa" or m.startswith("singa.")]:
        del sys.modules[name]
    backend = importlib.import_module("singa.sonnx.backend")
    rewrite()
