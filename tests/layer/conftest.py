"""Shared fixtures of the layer tests."""

import pytest


@pytest.fixture(autouse=True)
def training(autograd_training):
    """Every layer test records its operators' graph, as training does (see
    ``tests/conftest.py``)."""
    yield
