"""Normalization and regularization layers: BatchNorm2d, LayerNorm, RMSNorm, Dropout."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa import autograd
from singa.layer._util import adopt, new_buffer, new_param
from singa.layer.base import Layer
from singa.tensor import Tensor

__all__ = ["BatchNorm2d", "LayerNorm", "RMSNorm", "Dropout"]


class BatchNorm2d(Layer):
    """Batch normalization over the channels (axis 1) of NCHW inputs.

    Parameters ``scale`` (init 1) and ``bias`` (init 0), buffers ``running_mean``
    (init 0) and ``running_var`` (init 1), all of shape (C,).

    In training mode (``train()``, the default) the batch statistics normalise and the
    running statistics are updated in place as SINGA and ONNX do::

        running = momentum * running + (1 - momentum) * batch_statistic

    so SINGA's default ``momentum=0.9`` equals PyTorch's ``momentum=0.1``. In evaluation
    mode (``eval()``) the running statistics normalise. The mode is the layer's own
    (``self.training``), independent of ``autograd.training`` (graph recording).

    Forms: ``BatchNorm2d(momentum=0.9)`` (created on the first call from ``x.shape[1]``)
    and SINGA's ``BatchNorm2d(num_features[, momentum])`` (created now, moved to the first
    input's device and float dtype on the first call).
    """

    def __init__(
        self,
        num_features: int | None = None,
        momentum: float = 0.9,
        eps: float = 1e-5,
        name: str | None = None,
    ):
        super().__init__(name)
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"BatchNorm2d: momentum must be in [0, 1], got {momentum}")
        self.channels = None if num_features is None else int(num_features)
        self.momentum = float(momentum)
        self.eps = float(eps)
        self.scale: Tensor | None = None
        self.bias: Tensor | None = None
        self.running_mean: Tensor | None = None
        self.running_var: Tensor | None = None
        if self.channels is not None:
            self._create(None)

    @property
    def num_features(self) -> int | None:
        """The number of channels (PyTorch's name)."""
        return self.channels

    def _create(self, x: Tensor | None) -> None:
        shape = (self.channels,)
        self.scale = new_param(shape, x).set_value(1.0)
        self.bias = new_param(shape, x)
        self.running_mean = new_buffer(shape, x, 0.0)
        self.running_var = new_buffer(shape, x, 1.0)

    def initialize(self, x: Tensor) -> None:
        """Create the parameters and statistics from ``x.shape[1]``."""
        if x.ndim() < 2:
            raise ValueError(f"BatchNorm2d: expected input (N, C, ...), got shape {x.shape}")
        if self.scale is None:
            self.channels = x.shape[1]
            self._create(x)
        else:
            adopt((self.scale, self.bias, self.running_mean, self.running_var), x)

    def forward(self, x: Tensor) -> Tensor:
        """Normalise ``x``; updates the running statistics when training."""
        if x.ndim() < 2 or x.shape[1] != self.channels:
            raise ValueError(f"BatchNorm2d: expected {self.channels} channels, got input of shape {x.shape}")
        return autograd.batchnorm_2d(
            x,
            self.scale,
            self.bias,
            self.running_mean,
            self.running_var,
            momentum=self.momentum,
            eps=self.eps,
            training=self.training,
        )

    def __repr__(self) -> str:
        return f"BatchNorm2d({self.channels}, momentum={self.momentum}, eps={self.eps})"


class LayerNorm(Layer):
    """Layer normalization over the trailing dims ``x.shape[axis:]`` with elementwise
    ``scale`` (init 1) and ``bias`` (init 0) of that shape.

    ``LayerNorm(normalized_shape)`` (an int or a tuple, PyTorch's form) creates the
    parameters now and normalises the last ``len(normalized_shape)`` dims;
    ``LayerNorm(axis=-1)`` creates them on the first call from ``x.shape[axis:]``.
    """

    def __init__(
        self,
        normalized_shape: Any = None,
        eps: float = 1e-5,
        axis: int | None = None,
        name: str | None = None,
    ):
        super().__init__(name)
        self.eps = float(eps)
        self.scale: Tensor | None = None
        self.bias: Tensor | None = None
        if normalized_shape is None:
            self.normalized_shape = None
            self.axis = -1 if axis is None else int(axis)
        else:
            shape = (int(normalized_shape),) if isinstance(normalized_shape, int) else tuple(normalized_shape)
            if axis is not None and axis != -len(shape):
                raise ValueError(f"LayerNorm: axis {axis} does not match normalized_shape {shape}")
            self.normalized_shape = shape
            self.axis = -len(shape)
            self._create(None)

    def _create(self, x: Tensor | None) -> None:
        self.scale = new_param(self.normalized_shape, x).set_value(1.0)
        self.bias = new_param(self.normalized_shape, x)

    def initialize(self, x: Tensor) -> None:
        """Create ``scale`` and ``bias`` of shape ``x.shape[axis:]``."""
        if self.scale is None:
            if not -x.ndim() <= self.axis < x.ndim():
                raise ValueError(f"LayerNorm: axis {self.axis} is out of range for input of shape {x.shape}")
            self.normalized_shape = tuple(x.shape[self.axis :])
            self._create(x)
        else:
            adopt((self.scale, self.bias), x)

    def forward(self, x: Tensor) -> Tensor:
        """Normalise each sample over the trailing dims."""
        n = len(self.normalized_shape)
        if x.ndim() < n or tuple(x.shape[x.ndim() - n :]) != self.normalized_shape:
            raise ValueError(
                f"LayerNorm: expected trailing dims {self.normalized_shape}, got input of shape {x.shape}"
            )
        return autograd.layer_norm(x, self.scale, self.bias, axis=x.ndim() - n, eps=self.eps)


class Dropout(Layer):
    """Dropout: in training mode each element is zeroed with probability ``ratio`` and the
    rest scaled by 1 / (1 - ratio); identity in evaluation mode (``eval()``). The mask is
    drawn from the input device's generator."""

    def __init__(self, ratio: float = 0.5, name: str | None = None):
        super().__init__(name)
        if not 0.0 <= ratio < 1.0:
            raise ValueError(f"Dropout: ratio must be in [0, 1), got {ratio}")
        self.ratio = float(ratio)

    def forward(self, x: Tensor) -> Tensor:
        """``x`` with dropout applied when training."""
        return autograd.dropout(x, self.ratio, training=self.training)

    def __repr__(self) -> str:
        return f"Dropout(ratio={self.ratio})"


class RMSNorm(Layer):
    """Root-mean-square normalisation over the trailing dims ``normalized_shape``
    (PyTorch's ``nn.RMSNorm``): ``x / sqrt(mean(x^2) + eps) * weight``, ``weight``
    starting at 1 (no weight with ``elementwise_affine=False``). ``eps=None`` is the
    input dtype's machine epsilon, as PyTorch's."""

    def __init__(
        self,
        normalized_shape: Any,
        eps: float | None = None,
        elementwise_affine: bool = True,
        name: str | None = None,
    ):
        super().__init__(name)
        shape = (int(normalized_shape),) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        if not shape or any(s <= 0 for s in shape):
            raise ValueError(f"RMSNorm: normalized_shape must be positive sizes, got {normalized_shape}")
        self.normalized_shape = shape
        self.eps = None if eps is None else float(eps)
        self.elementwise_affine = bool(elementwise_affine)
        self.weight: Tensor | None = new_param(shape).set_value(1.0) if elementwise_affine else None

    def initialize(self, x: Tensor) -> None:
        """Move ``weight`` to the input's device and float dtype."""
        adopt((self.weight,), x)

    def forward(self, x: Tensor) -> Tensor:
        """Normalise each sample over the trailing dims."""
        n = len(self.normalized_shape)
        if x.ndim() < n or tuple(x.shape[x.ndim() - n :]) != self.normalized_shape:
            raise ValueError(
                f"RMSNorm: expected trailing dims {self.normalized_shape}, got input of shape {x.shape}"
            )
        eps = float(np.finfo(x.dtype).eps) if self.eps is None else self.eps
        return autograd.rms_norm(x, self.weight, axis=x.ndim() - n, eps=eps)

    def __repr__(self) -> str:
        return (
            f"RMSNorm({self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine})"
        )
