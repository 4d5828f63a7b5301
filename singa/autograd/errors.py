"""Errors raised by operators on bad input."""

from __future__ import annotations


class ShapeError(ValueError, AssertionError):
    """Operator inputs whose shapes (or axis) do not fit together. A ValueError, and
    also an AssertionError because Apache SINGA asserts these checks: code written for
    SINGA that catches AssertionError catches it too."""
