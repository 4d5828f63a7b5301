"""Shared fixtures of the operator tests."""

import pytest


@pytest.fixture(autouse=True)
def training(autograd_training):
    """Every operator test records its graph (see ``tests/conftest.py``)."""
    yield
