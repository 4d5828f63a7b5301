"""The layer classes of SINGA's autograd module (``autograd.Linear``, ``autograd.Conv2d``,
...), with their legacy signatures: every size is given, so parameters are created at
construction (on the default device, float32) and moved to the first input's device and
float dtype on the first call.

Importing this module (``import singa`` does) sets these names on :mod:`singa.autograd`:
the layers depend on autograd, never the other way round, so the legacy names are
attached downward from here rather than looked up from autograd. SINGA's autograd examples (the
"Operation + Layer" CNN, the Xception ``Block`` that subclasses ``autograd.Layer`` and
overrides ``__call__``) run unchanged::

    from singa import autograd
    conv1 = autograd.Conv2d(1, 32, 3, padding=1, bias=False)
    bn1 = autograd.BatchNorm2d(32)
    linear = autograd.Linear(32 * 28 * 28, 10)
"""

from __future__ import annotations

from typing import Any

from singa import autograd
from singa.layer import activation as _activation
from singa.layer import conv as _conv
from singa.layer import linear as _linear
from singa.layer import norm as _norm
from singa.layer import rnn as _rnn
from singa.layer.base import Layer
from singa.tensor import Tensor

__all__ = [
    "Layer",
    "Linear",
    "Conv2d",
    "SeparableConv2d",
    "BatchNorm2d",
    "MaxPool2d",
    "AvgPool2d",
    "MaxPool1d",
    "AvgPool1d",
    "ReLU",
    "RNN",
    "LSTM",
]


class Linear(_linear.Linear):
    """``autograd.Linear(in_features, out_features, bias=True)``: ``y = x @ W + b``."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__(in_features, out_features, bias=bias)


class Conv2d(_conv.Conv2d):
    """``autograd.Conv2d(in_channels, out_channels, kernel_size, stride=1, padding=0,
    dilation=1, group=1, bias=True, pad_mode="NOTSET")`` (see :class:`singa.layer.Conv2d`)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        dilation: Any = 1,
        group: int = 1,
        bias: bool = True,
        pad_mode: str = "NOTSET",
    ):
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride=stride,
            padding=padding,
            dilation=dilation,
            group=group,
            bias=bias,
            pad_mode=pad_mode,
        )


class SeparableConv2d(_conv.SeparableConv2d):
    """``autograd.SeparableConv2d(in_channels, out_channels, kernel_size, stride=1,
    padding=0, bias=False)``: depthwise then 1x1 convolution."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        bias: bool = False,
    ):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=bias)


class BatchNorm2d(_norm.BatchNorm2d):
    """``autograd.BatchNorm2d(num_features, momentum=0.9)``; running statistics follow
    ``running = momentum * running + (1 - momentum) * batch`` (PyTorch's momentum=0.1).

    As in SINGA's autograd examples, it uses batch statistics only while both the layer
    is in training mode and ``autograd.training`` is True, so setting
    ``autograd.training = False`` switches it to evaluation."""

    def __init__(self, num_features: int, momentum: float = 0.9):
        super().__init__(num_features, momentum)

    def forward(self, x: Tensor) -> Tensor:
        """Batch-normalise ``x`` (N, C, H, W)."""
        mode = self.training
        self.training = mode and autograd.training
        try:
            return super().forward(x)
        finally:
            self.training = mode


class MaxPool2d(_conv.MaxPool2d):
    """``autograd.MaxPool2d(kernel_size, stride=None, padding=0)``."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0):
        super().__init__(kernel_size, stride, padding)


class AvgPool2d(_conv.AvgPool2d):
    """``autograd.AvgPool2d(kernel_size, stride=None, padding=0)``."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0):
        super().__init__(kernel_size, stride, padding)


class MaxPool1d(_conv.MaxPool1d):
    """``autograd.MaxPool1d(kernel_size, stride=None, padding=0)``."""


class AvgPool1d(_conv.AvgPool1d):
    """``autograd.AvgPool1d(kernel_size, stride=None, padding=0)``."""


class ReLU(_activation.ReLU):
    """``autograd.ReLU()``: a layer applying max(x, 0) (returns a Tensor)."""


class RNN(_rnn.RNN):
    """``autograd.RNN(input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
    batch_first=False, dropout=0, bidirectional=False)``; ``rnn(xs, h0)`` with a list of
    (batch, input_size) steps returns ``(list of outputs, h)`` as SINGA's did."""


class LSTM(_rnn.LSTM):
    """``autograd.LSTM(input_size, hidden_size, nonlinearity="tanh", num_layers=1, bias=True,
    batch_first=False, dropout=0, bidirectional=False)``; ``lstm(xs, (h0, c0))`` with a list
    of steps returns ``(list of outputs, h, c)`` as SINGA's did."""


for _name in __all__:
    setattr(autograd, _name, globals()[_name])
