"""Fixtures for the ``singa-train`` tests: a CliRunner, an isolated data cache, and a
helper that runs the command in-process."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from singa.cli.main import cli


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Datasets are never looked for in (or downloaded to) the user's cache."""
    monkeypatch.setenv("SINGA_DATA", str(tmp_path_factory.mktemp("singa-cache")))


@pytest.fixture
def run(tmp_path, monkeypatch):
    """``run(*args)`` invokes singa-train in ``tmp_path`` and returns click's Result
    (stdout and stderr kept apart)."""
    monkeypatch.chdir(tmp_path)
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:  # click >= 8.2 always keeps them apart
        runner = CliRunner()

    def invoke(*args: str, **kw):
        return runner.invoke(cli, [str(a) for a in args], **kw)

    return invoke
