"""Shared fixtures of the kernel tests: the tests that also run operators record
their graph, as the operator tests do."""

import pytest

from singa.kernels import workers


@pytest.fixture(autouse=True)
def training(autograd_training):
    """Operators record their graph (see ``tests/conftest.py``)."""
    yield


@pytest.fixture
def pieces_seen(monkeypatch):
    """The pieces of every ``workers.run_pieces`` call made while the test runs, as
    lists, in call order (the calls still run)."""
    seen: list = []
    real = workers.run_pieces

    def recording(fn, pieces, *rest):
        seen.append(list(pieces))
        return real(fn, pieces, *rest)

    monkeypatch.setattr(workers, "run_pieces", recording)
    return seen
