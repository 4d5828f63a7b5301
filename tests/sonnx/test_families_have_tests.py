"""Every ONNX family (``singa.sonnx.registry.FAMILIES``) has its test files: the ONNX
tests ``tests/sonnx/test_onnx_<family>.py`` and, for a family with autograd operators
(a non-empty ``EXPORT`` table), the operator tests ``tests/autograd/test_<family>.py``.
A family that outgrew one file may hold its tests in a folder of the same name."""

from __future__ import annotations

from pathlib import Path

import pytest

from singa.sonnx import registry

TESTS = Path(__file__).resolve().parents[1]


def _name(family) -> str:
    return family.__name__.rsplit(".", 1)[1]


def _has(folder: Path, file_name: str, family: str) -> bool:
    sub = folder / family
    return (folder / file_name).is_file() or (sub.is_dir() and any(sub.glob("test_*.py")))


@pytest.mark.parametrize("family", registry.FAMILIES, ids=_name)
def test_every_family_has_its_test_files(family):
    name = _name(family)
    assert _has(TESTS / "sonnx", f"test_onnx_{name}.py", name), f"tests/sonnx/test_onnx_{name}.py is missing"
    if family.EXPORT:
        assert _has(TESTS / "autograd", f"test_{name}.py", name), f"tests/autograd/test_{name}.py is missing"


def test_the_guard_sees_a_missing_file(tmp_path):
    (tmp_path / "test_onnx_here.py").write_text("")
    (tmp_path / "grown").mkdir()
    (tmp_path / "grown" / "test_part.py").write_text("")
    assert _has(tmp_path, "test_onnx_here.py", "here")
    assert _has(tmp_path, "test_onnx_grown.py", "grown")
    assert not _has(tmp_path, "test_onnx_absent.py", "absent")
