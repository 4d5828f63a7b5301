"""docs/singa-compat.md against the package: supported/differs names exist, missing ones do not."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "singa-compat.md"
ROW = re.compile(r"^\|\s*`([A-Za-z_][\w.]*)`\s*\|\s*(supported|differs|n/a|missing)\s*\|(.*)\|\s*$")
STATUSES = ("supported", "differs", "n/a", "missing")


def _rows() -> list[tuple[str, str, str]]:
    rows = []
    for line in DOC.read_text().splitlines():
        if line.startswith("| `"):
            m = ROW.match(line)
            assert m, f"malformed table row in {DOC.name}: {line!r}"
            rows.append((m.group(1), m.group(2), m.group(3).strip()))
    return rows


ROWS = _rows()


def _resolve(name: str) -> object:
    """``module.attr.attr`` under ``singa``; ``device.Device.x`` on the default device."""
    module, *attrs = name.split(".")
    obj: object = importlib.import_module(f"singa.{module}")
    if module == "device" and attrs[:1] == ["Device"] and len(attrs) == 2:
        obj, attrs = obj.get_default_device(), attrs[1:]
    for a in attrs:
        obj = getattr(obj, a)
    return obj


def test_the_table_is_well_formed():
    names = [n for n, _, _ in ROWS]
    assert len(names) > 400
    dupes = sorted({n for n in names if names.count(n) > 1})
    assert not dupes, f"listed twice: {dupes}"
    for name, status, note in ROWS:
        if status in ("differs", "n/a"):
            assert note, f"{name} is '{status}' without a note saying how"


@pytest.mark.parametrize("name", [n for n, s, _ in ROWS if s in ("supported", "differs")])
def test_listed_names_exist(name):
    try:
        _resolve(name)
    except (AttributeError, ImportError) as e:
        pytest.fail(f"docs/singa-compat.md lists {name} as available, but: {e}")


@pytest.mark.parametrize("name", [n for n, s, _ in ROWS if s == "missing"])
def test_missing_names_are_really_missing(name):
    try:
        _resolve(name)
    except (AttributeError, ImportError):
        return
    pytest.fail(f"{name} exists now: mark it supported (or differs) in docs/singa-compat.md")
