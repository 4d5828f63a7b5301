"""Fixtures shared by several test folders."""

import pytest

from singa import autograd


@pytest.fixture
def autograd_training():
    """Operators record their graph (``autograd.training`` True) during the test; the
    previous value comes back afterwards."""
    prev = autograd.training
    autograd.training = True
    yield
    autograd.training = prev
