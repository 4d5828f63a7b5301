"""Shared fixtures of the kernel tests: the tests that also run operators record
their graph, as the operator tests do."""

import pytest


@pytest.fixture(autouse=True)
def training(autograd_training):
    """Operators record their graph (see ``tests/conftest.py``)."""
    yield
