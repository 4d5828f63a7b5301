"""What an operator's ``backward`` returns when user code calls it directly.

In Apache SINGA an operator's ``backward`` returns C++ tensors, whose shape is a method:
SINGA programs (its own tests among them) write ``dx = y.creator.backward(dy.data)``
and then ``dx.shape()``. Here gradients are numpy arrays, whose ``shape`` is an
attribute. A direct call therefore returns each numpy gradient as a
:class:`GradientArray`: a view of the same memory (no copy; values and dtype
unchanged) whose ``shape`` is a :class:`CallableShape`, a tuple that also answers
when called. ``dx.shape == (2, 3)``, ``dx.shape() == (2, 3)``, numpy functions,
``tensor.from_raw_tensor(dx)`` and ``tensor.from_numpy(dx)`` all work (the two
latter hold a plain array: ``Tensor.data`` is never a view of this kind).

The autograd engine and graph replay never see these views: they call the
operator's backward as its class wrote it (see :class:`~singa.autograd.engine.Operation`).
Gradients on a GPU (cupy arrays) are returned as they are.

Example::

    y = autograd.relu(x)
    dx = y.creator.backward(np.ones(y.shape, np.float32))
    assert dx.shape() == dx.shape == x.shape
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["CallableShape", "GradientArray", "gradient_views"]


class CallableShape(tuple):
    """A shape tuple that also returns itself (as a plain tuple) when called, so both
    numpy's ``a.shape`` and SINGA's ``a.shape()`` read it."""

    __slots__ = ()

    def __call__(self) -> tuple:
        return tuple(self)


class GradientArray(np.ndarray):
    """A numpy array whose ``shape`` is a :class:`CallableShape`; otherwise a plain
    ndarray (made with ``array.view(GradientArray)``, sharing the array's memory)."""

    @property
    def shape(self) -> CallableShape:
        """The shape; a tuple that can also be called, as SINGA's ``shape()``."""
        return CallableShape(np.ndarray.shape.__get__(self))

    @shape.setter
    def shape(self, value: Any) -> None:
        np.ndarray.shape.__set__(self, value)


def _view(g: Any) -> Any:
    if isinstance(g, np.ndarray):
        return g.view(GradientArray)
    if isinstance(g, np.generic):
        return np.asarray(g).view(GradientArray)
    return g  # None, or a cupy array


def gradient_views(result: Any) -> Any:
    """``result`` of an operator's backward (an array, None, or a tuple or list of
    them) with every numpy array viewed as a :class:`GradientArray`."""
    if isinstance(result, tuple | list):
        return type(result)(_view(g) for g in result)
    return _view(result)
