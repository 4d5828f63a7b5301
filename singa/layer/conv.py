"""Convolution and pooling layers (NCHW)."""

from __future__ import annotations

import math
from typing import Any

from singa import autograd, initializer
from singa.kernels.conv_geometry import pair, same_pads
from singa.layer._util import adopt, check_pad_mode, new_param, padding4
from singa.layer.base import Layer
from singa.tensor import Tensor

__all__ = [
    "Conv2d",
    "SeparableConv2d",
    "Pooling2d",
    "MaxPool2d",
    "AvgPool2d",
    "MaxPool1d",
    "AvgPool1d",
    "GlobalAvgPool2d",
]

_PAD_DOC = """padding: an int, a pair (ph, pw), or SINGA's 4-tuple (top, bottom, left, right).
        pad_mode: "NOTSET" (use ``padding``), "VALID" (no padding), or "SAME_UPPER" /
            "SAME_LOWER" (pad so the output is ceil(input / stride); an odd total puts the
            extra pixel at the end / the beginning). SAME pads are recomputed for every input
            size."""


def _pads(layer: Any, x: Tensor) -> tuple:
    """The (top, left, bottom, right) pads for input ``x``."""
    if layer.pad_mode in ("SAME_UPPER", "SAME_LOWER"):
        return same_pads(layer.pad_mode, x.shape[2:4], layer.kernel_size, layer.stride, layer.dilation)
    if layer.pad_mode == "VALID":
        return (0, 0, 0, 0)
    return layer.pads


class Conv2d(Layer):
    """2-D convolution over NCHW inputs, ``W`` of shape (nb_kernels, in_channels // group,
    kh, kw) and ``b`` of shape (nb_kernels,).

    Forms (SINGA's):

    - ``Conv2d(nb_kernels, kernel_size, stride=1, padding=0, dilation=1, group=1,
      bias=True, pad_mode="NOTSET")``: parameters created on the first call from the
      input's channels, device and float dtype;
    - legacy ``Conv2d(in_channels, out_channels, kernel_size[, stride[, padding[, dilation[,
      group[, bias]]]]], ...)``: created now and moved to the first input's device and
      float dtype on the first call.

    Args:
        kernel_size, stride, dilation: an int or a pair.
        group: number of groups (``group == in_channels`` is a depthwise convolution).
        activation: "NOTSET" or "RELU" (a ReLU applied to the output).
        {pad}

    Defaults follow PyTorch: ``W`` kaiming_uniform(a=sqrt(5)), i.e. U(+-1/sqrt(fan_in)) with
    fan_in = in_channels // group * kh * kw, and ``b ~ U(+-1/sqrt(fan_in))``.
    """

    def __init__(
        self,
        nb_kernels: int,
        kernel_size: Any,
        *args: Any,
        stride: Any = 1,
        padding: Any = 0,
        dilation: Any = 1,
        group: int = 1,
        bias: bool = True,
        pad_mode: str = "NOTSET",
        activation: str = "NOTSET",
        name: str | None = None,
    ):
        super().__init__(name)
        in_channels = None
        if args:  # legacy Conv2d(in_channels, out_channels, kernel_size, stride, padding, ...)
            if len(args) > 6:
                raise TypeError(f"Conv2d: too many positional arguments {(nb_kernels, kernel_size) + args}")
            in_channels, nb_kernels, kernel_size = nb_kernels, kernel_size, args[0]
            rest = dict(zip(("stride", "padding", "dilation", "group", "bias"), args[1:]))
            stride = rest.get("stride", stride)
            padding = rest.get("padding", padding)
            dilation = rest.get("dilation", dilation)
            group = rest.get("group", group)
            bias = rest.get("bias", bias)
        self.in_channels = None if in_channels is None else int(in_channels)
        self.nb_kernels = int(nb_kernels)
        self.kernel_size = pair(kernel_size, "kernel_size", "Conv2d")
        self.stride = pair(stride, "stride", "Conv2d")
        self.dilation = pair(dilation, "dilation", "Conv2d")
        self.padding = padding
        self.pads = padding4(padding if padding is not None else 0, "Conv2d")
        self.group = int(group)
        self.bias = bool(bias)
        self.pad_mode = check_pad_mode(pad_mode, "Conv2d")
        self.activation = str(activation).upper()
        if self.activation not in ("NOTSET", "RELU"):
            raise ValueError(f"Conv2d: activation must be 'NOTSET' or 'RELU', got {activation!r}")
        if self.group < 1 or self.nb_kernels % self.group:
            raise ValueError(f"Conv2d: nb_kernels {self.nb_kernels} is not divisible by group {self.group}")
        self.W: Tensor | None = None
        self.b: Tensor | None = None
        if self.in_channels is not None:
            self._create(None)

    @property
    def out_channels(self) -> int:
        """The number of output channels (= ``nb_kernels``)."""
        return self.nb_kernels

    def _create(self, x: Tensor | None) -> None:
        if self.in_channels % self.group:
            raise ValueError(f"Conv2d: in_channels {self.in_channels} is not divisible by group {self.group}")
        kh, kw = self.kernel_size
        self.W = new_param((self.nb_kernels, self.in_channels // self.group, kh, kw), x)
        initializer.kaiming_uniform(self.W, a=math.sqrt(5))
        if self.bias:
            fan_in = self.in_channels // self.group * kh * kw
            self.b = new_param((self.nb_kernels,), x)
            bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
            self.b.uniform(-bound, bound)

    def initialize(self, x: Tensor) -> None:
        """Create ``W`` and ``b`` from ``x.shape[1]`` (or adopt x's device and dtype)."""
        if x.ndim() != 4:
            raise ValueError(f"Conv2d: expected an NCHW input, got shape {x.shape}")
        if self.W is None:
            self.in_channels = x.shape[1]
            self._create(x)
        else:
            adopt((self.W, self.b), x)

    def pads_for(self, x: Tensor) -> tuple:
        """The (top, left, bottom, right) pads this layer applies to input ``x``."""
        return _pads(self, x)

    def forward(self, x: Tensor) -> Tensor:
        """The convolution of ``x`` (N, in_channels, H, W)."""
        if x.ndim() != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"Conv2d: expected input (N, {self.in_channels}, H, W), got shape {x.shape}")
        y = autograd.conv2d(
            x,
            self.W,
            self.b if self.bias else None,
            stride=self.stride,
            padding=_pads(self, x),
            dilation=self.dilation,
            groups=self.group,
        )
        if self.activation == "RELU":
            y = autograd.relu(y)
        return y

    def __repr__(self) -> str:
        return (
            f"Conv2d({self.in_channels}, {self.nb_kernels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding}, group={self.group}, bias={self.bias})"
        )


Conv2d.__doc__ = Conv2d.__doc__.replace("{pad}", _PAD_DOC)


class SeparableConv2d(Layer):
    """Depthwise separable convolution: a depthwise ``Conv2d`` (group = in_channels,
    ``depthwise_conv``) followed by a 1x1 ``Conv2d`` (``point_conv``).

    Forms (SINGA's): ``SeparableConv2d(nb_kernels, kernel_size, stride=1, padding=0,
    bias=False)`` (sublayers created on the first call) and the legacy
    ``SeparableConv2d(in_channels, out_channels, kernel_size[, stride[, padding[, bias]]])``
    (created now).
    """

    def __init__(
        self,
        nb_kernels: int,
        kernel_size: Any,
        *args: Any,
        stride: Any = 1,
        padding: Any = 0,
        bias: bool = False,
        pad_mode: str = "NOTSET",
        name: str | None = None,
    ):
        super().__init__(name)
        in_channels = None
        if args:  # legacy (in_channels, out_channels, kernel_size, stride, padding, bias)
            if len(args) > 4:
                raise TypeError(
                    f"SeparableConv2d: too many positional arguments {(nb_kernels, kernel_size) + args}"
                )
            in_channels, nb_kernels, kernel_size = nb_kernels, kernel_size, args[0]
            rest = dict(zip(("stride", "padding", "bias"), args[1:]))
            stride = rest.get("stride", stride)
            padding = rest.get("padding", padding)
            bias = rest.get("bias", bias)
        self.in_channels = None if in_channels is None else int(in_channels)
        self.nb_kernels = int(nb_kernels)
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.bias = bool(bias)
        self.pad_mode = check_pad_mode(pad_mode, "SeparableConv2d")
        self.depthwise_conv: Conv2d | None = None
        self.point_conv: Conv2d | None = None
        if self.in_channels is not None:
            self._create()

    def _create(self) -> None:
        c = self.in_channels
        self.depthwise_conv = Conv2d(
            c,
            c,
            self.kernel_size,
            stride=self.stride,
            padding=self.padding,
            group=c,
            bias=self.bias,
            pad_mode=self.pad_mode,
        )
        self.point_conv = Conv2d(c, self.nb_kernels, 1, bias=self.bias)
        self.depthwise_conv.training = self.point_conv.training = self.training

    def initialize(self, x: Tensor) -> None:
        """Create the two convolutions from ``x.shape[1]``."""
        if self.depthwise_conv is None:
            if x.ndim() != 4:
                raise ValueError(f"SeparableConv2d: expected an NCHW input, got shape {x.shape}")
            self.in_channels = x.shape[1]
            self._create()

    def forward(self, x: Tensor) -> Tensor:
        """``point_conv(depthwise_conv(x))``."""
        return self.point_conv(self.depthwise_conv(x))


class Pooling2d(Layer):
    """2-D max or average pooling over NCHW inputs (SINGA's signature).

    Args:
        kernel_size, stride: an int or a pair; ``stride`` defaults to ``kernel_size``.
        is_max: max pooling (padding counts as -inf) or average pooling.
        ceil_mode: round the output size up (keyword only).
        count_include_pad: average pooling divides by the full window, padded zeros
            included, or by the number of real cells (the default, as SINGA's oneDNN and
            cuDNN kernels and ONNX AveragePool's default count_include_pad=0; keyword
            only).
        {pad}
    """

    def __init__(
        self,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        is_max: bool = True,
        pad_mode: str = "NOTSET",
        name: str | None = None,
        *,
        ceil_mode: bool = False,
        count_include_pad: bool = False,
    ):
        super().__init__(name)
        self.ceil_mode = bool(ceil_mode)
        self.count_include_pad = bool(count_include_pad)
        self.kernel_size = pair(kernel_size, "kernel_size", type(self).__name__)
        self.stride = self.kernel_size if stride is None else pair(stride, "stride", type(self).__name__)
        self.dilation = (1, 1)
        self.padding = padding
        self.pads = padding4(padding if padding is not None else 0, type(self).__name__)
        self.is_max = bool(is_max)
        self.pad_mode = check_pad_mode(pad_mode, type(self).__name__)

    def forward(self, x: Tensor) -> Tensor:
        """Pool ``x`` (N, C, H, W)."""
        if x.ndim() != 4:
            raise ValueError(f"{type(self).__name__}: expected an NCHW input, got shape {x.shape}")
        pads = _pads(self, x)
        if self.is_max:
            return autograd.max_pool_2d(x, self.kernel_size, self.stride, pads, self.ceil_mode)
        return autograd.avg_pool_2d(
            x, self.kernel_size, self.stride, pads, self.ceil_mode, self.count_include_pad
        )

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding})"


Pooling2d.__doc__ = Pooling2d.__doc__.replace("{pad}", _PAD_DOC)


class MaxPool2d(Pooling2d):
    """2-D max pooling: ``MaxPool2d(kernel_size, stride=None, padding=0, pad_mode="NOTSET")``
    (see :class:`Pooling2d`)."""

    def __init__(
        self,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        pad_mode: str = "NOTSET",
        name: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(kernel_size, stride, padding, True, pad_mode, name, **kwargs)


class AvgPool2d(Pooling2d):
    """2-D average pooling: ``AvgPool2d(kernel_size, stride=None, padding=0,
    pad_mode="NOTSET")`` (see :class:`Pooling2d`)."""

    def __init__(
        self,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        pad_mode: str = "NOTSET",
        name: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(kernel_size, stride, padding, False, pad_mode, name, **kwargs)


class _Pool1d(Layer):
    """1-D pooling over (N, C, L) inputs, or SINGA's (N, C, 1, L)."""

    is_max = True

    def __init__(
        self,
        kernel_size: int,
        stride: int | None = None,
        padding: int = 0,
        pad_mode: str = "NOTSET",
        name: str | None = None,
    ):
        super().__init__(name)
        self.kernel_size = int(kernel_size)
        self.stride = self.kernel_size if stride is None else int(stride)
        self.padding = int(padding)
        self.pad_mode = check_pad_mode(pad_mode, type(self).__name__)

    def _pads(self, length: int) -> tuple[int, int]:
        """(begin, end) pads along L for the current ``pad_mode``."""
        if self.pad_mode in ("SAME_UPPER", "SAME_LOWER"):
            return same_pads(self.pad_mode, (length,), (self.kernel_size,), (self.stride,), (1,))
        if self.pad_mode == "VALID":
            return 0, 0
        return self.padding, self.padding

    def forward(self, x: Tensor) -> Tensor:
        """Pool along the last axis."""
        if x.ndim() == 3:
            f = autograd.max_pool_1d if self.is_max else autograd.avg_pool_1d
            return f(x, self.kernel_size, self.stride, self._pads(x.shape[2]))
        if x.ndim() == 4 and x.shape[2] == 1:
            f = autograd.max_pool_2d if self.is_max else autograd.avg_pool_2d
            b, e = self._pads(x.shape[3])
            return f(x, (1, self.kernel_size), (1, self.stride), (0, b, 0, e))
        raise ValueError(
            f"{type(self).__name__}: expected input (N, C, L) or (N, C, 1, L), got shape {x.shape}"
        )


class MaxPool1d(_Pool1d):
    """1-D max pooling: ``MaxPool1d(kernel_size, stride=None, padding=0, pad_mode="NOTSET")``
    over (N, C, L) (or SINGA's (N, C, 1, L)) inputs; ``pad_mode`` as in :class:`Pooling2d`."""

    is_max = True


class AvgPool1d(_Pool1d):
    """1-D average pooling: ``AvgPool1d(kernel_size, stride=None, padding=0,
    pad_mode="NOTSET")`` over (N, C, L) (or SINGA's (N, C, 1, L)) inputs; padded zeros are
    not counted (as SINGA's kernels); ``pad_mode`` as in :class:`Pooling2d`."""

    is_max = False


class GlobalAvgPool2d(Layer):
    """Average over the spatial dims: (N, C, H, W) -> (N, C, 1, 1) (ONNX GlobalAveragePool)."""

    def forward(self, x: Tensor) -> Tensor:
        """The mean of each channel map."""
        return autograd.global_avg_pool(x)
