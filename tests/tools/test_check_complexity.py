"""tools/check_complexity.py reports what .ci/run must reject."""

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("radon")

_PATH = Path(__file__).resolve().parents[2] / "tools" / "check_complexity.py"
_spec = importlib.util.spec_from_file_location("check_complexity", _PATH)
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)


def _branchy(n: int) -> str:
    body = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(n))
    return f"def f(x):\n{body}    return -1\n"


def test_a_grade_d_function_and_a_long_file_are_reported(tmp_path):
    (tmp_path / "ok.py").write_text(_branchy(19))  # complexity 20: grade C
    (tmp_path / "bad.py").write_text(_branchy(20))  # complexity 21: grade D
    (tmp_path / "long.py").write_text("x = 1\n" * (check.MAX_CODE_LINES + 1))
    found = check.problems([tmp_path])
    assert len(found) == 2
    assert "bad.py:1 f: grade D (21)" in found[0]
    assert f"long.py: {check.MAX_CODE_LINES + 1} lines of code" in found[1]
    (tmp_path / "clean").mkdir()
    (tmp_path / "clean" / "ok.py").write_text(_branchy(19))
    assert check.main([str(tmp_path / "clean")]) == 0
    assert check.main([str(tmp_path)]) == 1


def test_methods_are_checked(tmp_path):
    src = "class K:\n" + "".join("    " + line + "\n" for line in _branchy(25).splitlines())
    (tmp_path / "k.py").write_text(src)
    found = check.problems([tmp_path])
    assert any("K.f: grade D (26)" in line for line in found)


def test_comments_docstrings_and_blank_lines_are_not_code(tmp_path):
    src = (
        '"""A module docstring\nover two lines."""\n'
        "\n"
        "# a comment\n"
        "def f(x):  # a trailing comment: the line holds code\n"
        '    """The docstring."""\n'
        '    s = """a string\n    that is a value"""\n'
        "    return (x +\n"
        "            1)\n"
    )
    assert check.code_lines(src) == 5  # def, the two lines of s, the two lines of return
    (tmp_path / "explained.py").write_text(
        "# why\n" * 1000 + '"""doc"""\n' * 100 + "\n" * 100 + "x = 1\n" * check.MAX_CODE_LINES
    )
    assert check.problems([tmp_path]) == []
    (tmp_path / "explained.py").write_text("x = 1\n" * (check.MAX_CODE_LINES + 1))
    n = check.MAX_CODE_LINES
    assert check.problems([tmp_path]) == [f"{tmp_path / 'explained.py'}: {n + 1} lines of code (at most {n})"]
