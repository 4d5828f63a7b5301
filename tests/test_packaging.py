"""What ``pip install .`` installs: only the ``singa`` package (the command's code is
``singa.cli``; no top-level module named ``cli`` that another project may own), and the
``singa-train`` entry point resolves to a callable in it."""

import importlib
import sys
from pathlib import Path

from setuptools import find_packages

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_only_the_singa_package_is_installed():
    include = PROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = find_packages(where=str(ROOT), include=include)
    assert "singa" in packages and "singa.cli" in packages
    assert {p.split(".")[0] for p in packages} == {"singa"}
    assert not (ROOT / "cli").exists()


def test_the_command_entry_point_is_in_the_package():
    target = PROJECT["project"]["scripts"]["singa-train"]
    module, _, attr = target.partition(":")
    assert module.startswith("singa.")
    assert callable(getattr(importlib.import_module(module), attr))
