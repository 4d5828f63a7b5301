"""Shared fixtures of the operator tests."""

import pytest

from singa import autograd


@pytest.fixture(autouse=True)
def training():
    """Operators record their graph (``autograd.training`` True) in every test; the
    previous value comes back afterwards."""
    prev = autograd.training
    autograd.training = True
    yield
    autograd.training = prev
