"""Eval-only fused kernels, called by the inference graphs of :mod:`singa.model.inference`.

Each is a small callable object run on arrays by a generated replay function. They
call the kernels directly (:func:`singa.kernels.conv_forward.forward` for a
convolution) and add what the fusion saves: the bias, BatchNorm's evaluation, a
residual, ReLU and a max-pool applied to the product's output in place, slice by
slice for a convolution (:mod:`singa.kernels.conv_epilogue`), instead of a new array
and a pass over memory for each. None keeps a backward cache: these kernels exist
only for evaluation.

Per element they compute what the unfused operators compute (``max(x @ W + b, 0)`` with
the same roundings), so fusing them alone keeps eval results bitwise equal; only the
``fold`` rewrites of :mod:`singa.model.inference` (BatchNorm folded into the weights,
Winograd filters, both made once) change bits.
"""

from __future__ import annotations

from typing import Any

import singa.kernels.conv_winograd as winograd
from singa.device import array_module
from singa.kernels import conv_forward
from singa.kernels.conv_epilogue import pool_window
from singa.kernels.jit import takes_floats
from singa.kernels.products import matmul as _product

__all__ = ["ConvForward", "LinearForward"]


def _relu_in_place(y: Any) -> Any:
    """``y = max(y, 0)`` written into ``y`` (whose memory the caller owns)."""
    array_module(y).maximum(y, 0, out=y)
    return y


class ConvForward:
    """``conv(x, W) + b``, then BatchNorm's evaluation when ``bn`` is given, plus a
    residual when ``add`` is given, then ReLU in place when ``relu``, then a max-pool
    when ``pool`` is given: the forward of a traced
    :class:`~singa.autograd.conv.Conv2d` operator (its geometry) on given weights.

    A call takes ``(x, W[, b][, scale, bias, running_mean, running_var][, residual])``.

    Args:
        conv: the traced convolution operator (its geometry; the kernels of
            :mod:`singa.kernels.conv_forward` are called with it).
        relu: apply ReLU to the result in place.
        add: the traced :class:`~singa.autograd.elementwise.Add` that adds a residual
            to the convolution's output (a ResNet block's shortcut), or None.
        residual_first: the residual was the Add's first operand.
        bias: whether a call passes a bias after ``W``.
        pool: the traced :class:`~singa.autograd.pooling.MaxPool2d` (without padding)
            applied last, or None.
        bn: the traced :class:`~singa.autograd.normalization.BatchNorm2d` (in
            evaluation) applied to the convolution's output, with its parameters read
            live on every call, or None.
        filters: the weights transformed for a Winograd convolution
            (:func:`singa.kernels.conv_winograd.transform_filters`, a snapshot taken
            when the graph was built), or None: then inputs that fit it run through
            them instead of ``W``.
    """

    def __init__(
        self,
        conv: Any,
        relu: bool,
        add: Any = None,
        residual_first: bool = False,
        bias: bool = True,
        pool: Any = None,
        bn: Any = None,
        filters: Any = None,
    ):
        self.conv = conv
        self.filters = filters
        self.relu = relu
        self.add = add
        self.residual_first = residual_first
        self.bias = bias
        self.pool = pool
        self.bn = bn

    def __call__(self, x: Any, W: Any, *rest: Any) -> Any:
        b = rest[0] if self.bias else None
        stats = rest[self.bias : self.bias + 4] if self.bn is not None else ()
        r = rest[-1] if self.add is not None else None
        if (r is not None and not self._adds_in_place(x, W, r)) or (stats and not takes_floats(x)):
            return self._as_traced(x, W, b, stats, r)
        # BatchNorm, the residual, ReLU and pooling on each batch slice of the output as
        # the convolution makes it (on its workers, while the slice is in cache) instead
        # of a pass over the whole output for each
        affine = self.bn.eval_coefficients(*stats, x.dtype) if stats else None
        window = None if self.pool is None else pool_window(self.pool)
        steps = dict(relu=self.relu, residual=r, pool=window, affine=affine)
        if self.filters is not None and winograd.fits(self.conv, x, self.filters):
            return winograd.forward(self.conv, x, self.filters, b, **steps)
        return conv_forward.forward(x, W, b, **self.conv.geometry(), **steps)

    def _as_traced(self, x: Any, W: Any, b: Any, stats: tuple, r: Any) -> Any:
        """The absorbed operators one after another, as traced: for a residual that
        broadcasts or has another dtype (the Add's own promotion), and for BatchNorm
        on inputs its CPU kernels do not take as they are (float16, a GPU)."""
        y = self.conv.forward(x, W, b)
        if stats:
            y = self.bn.forward(y, *stats)
        if r is not None:
            y = self.add.forward(r, y) if self.residual_first else self.add.forward(y, r)
        y = _relu_in_place(y) if self.relu else y
        return self.pool.forward(y) if self.pool is not None else y

    def _adds_in_place(self, x: Any, W: Any, r: Any) -> bool:
        """Whether the residual ``r`` has the output's shape and dtype (a + b of the
        Add then rounds as the output's own addition; otherwise the Add runs as traced:
        broadcasting, type promotion)."""
        return r.dtype == x.dtype and tuple(r.shape) == self.conv.output_shape(x.shape, W.shape)

    def __repr__(self) -> str:
        bn = ", batchnorm" if self.bn is not None else ""
        residual = ", residual" if self.add is not None else ""
        pool = f", max-pool {self.pool.kernel_size}" if self.pool is not None else ""
        wino = ", winograd" if self.filters is not None else ""
        return f"ConvForward({self.conv.kernel_size}{bn}{residual}, relu={self.relu}{pool}{wino})"


class LinearForward:
    """``x @ W``, plus ``b`` added in place (shape (O,) or (1, O)), then ReLU in place
    when ``relu``.

    Args:
        relu: apply ReLU to the result in place.
    """

    def __init__(self, relu: bool):
        self.relu = relu

    def __call__(self, x: Any, W: Any, b: Any = None) -> Any:
        y = _product(x, W)  # as MatMul does (a large product in row blocks on the workers)
        if b is not None:
            y += b.reshape(1, -1)
        return _relu_in_place(y) if self.relu else y

    def __repr__(self) -> str:
        return f"LinearForward(relu={self.relu})"
