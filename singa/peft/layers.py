"""LoRA layers: a frozen base layer plus a trainable low-rank update.

``y = base(x) + scaling * B(A(dropout(x)))`` where ``A`` maps the input to ``r``
features and ``B`` maps them back to the output, ``scaling = lora_alpha / r`` (or
``lora_alpha / sqrt(r)`` with ``use_rslora``). ``A`` starts as N(0, 2 / (fan_in +
fan_out)) (SINGA's initialisation) and ``B`` as zeros, so a fresh adapter leaves the
output unchanged. The tensors keep peft's (and SINGA's) shapes: for a ``Linear`` with
``in_features`` inputs and ``out_features`` outputs ``lora_A`` is (r, in_features) and
``lora_B`` (out_features, r); for a ``Conv2d`` ``lora_A`` is a convolution (r,
in_channels, kh, kw) with the base's stride, padding and dilation and ``lora_B`` a 1x1
convolution (out_channels, r, 1, 1).

:meth:`LoRALayer.merge` adds ``scaling * B @ A`` into the base weight (computed in
float64 and rounded once) so the layer runs as the plain base layer; :meth:`unmerge`
subtracts it again. Both change the base weight in place: a
:class:`~singa.model.Model` holding the layer must drop its traces
(``model.reset_graph()``, which :class:`~singa.peft.PeftModel` does).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from singa import autograd
from singa.layer.base import Layer
from singa.layer.conv import Conv2d
from singa.layer.linear import Linear
from singa.tensor import Tensor

__all__ = ["LoRALayer", "LinearLoRALayer", "Conv2dLoRALayer", "lora_scaling", "set_frozen"]


def set_frozen(tensors: Any, frozen: bool) -> None:
    """Freeze (or unfreeze) parameters as :meth:`singa.model.Model.freeze` does: a
    frozen one keeps ``stores_grad`` (it stays among ``get_params()``, so mixed
    precision still casts it and checkpoints list it) but loses ``requires_grad``, so
    autograd computes no gradient for it and the optimizer gives it no slots."""
    for t in tensors:
        if t is not None:
            t.requires_grad = not frozen
            if not frozen:
                t.stores_grad = True


def lora_scaling(r: int, lora_alpha: float, use_rslora: bool = False) -> float:
    """``lora_alpha / r``, or ``lora_alpha / sqrt(r)`` for rank-stabilized LoRA."""
    return lora_alpha / (math.sqrt(r) if use_rslora else r)


def _check(r: Any, lora_alpha: Any, lora_dropout: Any) -> None:
    if isinstance(r, bool) or not isinstance(r, int | np.integer) or r <= 0:
        raise ValueError(f"`r` should be a positive integer value but the value passed is {r!r}")
    number = (int, float, np.integer, np.floating)
    if isinstance(lora_alpha, bool) or not isinstance(lora_alpha, number) or not math.isfinite(lora_alpha):
        raise ValueError(f"lora_alpha must be a finite number, got {lora_alpha!r}")
    if isinstance(lora_dropout, bool) or not isinstance(lora_dropout, number) or not 0 <= lora_dropout < 1:
        raise ValueError(f"lora_dropout must be a number in [0, 1), got {lora_dropout!r}")


class LoRALayer(Layer):
    """What the LoRA layers share: the adapter tensors, the scaling, freezing the
    base layer's weights and merging. Subclasses define the tensors' shapes
    (:meth:`adapter_shapes`), the update (:meth:`adapter_output`) and
    :meth:`delta_weight` in the base weight's layout.

    The adapter tensors are created as soon as the base layer has its weight (at
    construction for a base that was called or sized already, else on the first
    call) on the weight's device and with its dtype. The base's ``W`` and ``b`` are
    frozen then (:func:`set_frozen`: no gradient, so no optimizer slots).
    """

    def __init__(
        self,
        base_layer: Layer,
        r: int = 8,
        lora_alpha: float = 1,
        lora_dropout: float = 0.0,
        use_rslora: bool = False,
        name: str | None = None,
    ):
        _check(r, lora_alpha, lora_dropout)
        self.check_base(base_layer)
        super().__init__(name)
        self.base_layer: Any = base_layer  # a Linear or Conv2d (checked above)
        self.r = int(r)
        self.lora_alpha = lora_alpha
        self.lora_dropout = float(lora_dropout)
        self.use_rslora = bool(use_rslora)
        self.scaling = lora_scaling(self.r, lora_alpha, self.use_rslora)
        self.merged = False
        self.lora_A: Tensor | None = None
        self.lora_B: Tensor | None = None
        if self.base_layer.W is not None:
            self.create_adapters()

    # ----- what subclasses define --------------------------------------------------------------
    @classmethod
    def check_base(cls, base_layer: Any) -> None:
        """TypeError or ValueError unless ``base_layer`` can take this adapter."""
        raise NotImplementedError(f"{cls.__name__}.check_base")

    def adapter_shapes(self) -> tuple[tuple, tuple, float]:
        """The shapes of ``lora_A`` and ``lora_B`` and the std of ``lora_A``'s init."""
        raise NotImplementedError(f"{type(self).__name__}.adapter_shapes")

    def adapter_output(self, x: Tensor) -> Tensor:
        """``scaling * B(A(dropout(x)))``, in the base output's shape."""
        raise NotImplementedError(f"{type(self).__name__}.adapter_output")

    def delta_weight(self) -> Any:
        """``scaling * B @ A`` as a float64 array in the layout of the base's ``W``."""
        raise NotImplementedError(f"{type(self).__name__}.delta_weight")

    # ----- creation -----------------------------------------------------------------------------
    @property
    def initialized(self) -> bool:
        """True once the base layer has run its first call and the adapters exist."""
        return getattr(self, "lora_A", None) is not None and self.base_layer.initialized

    def create_adapters(self) -> None:
        """Create ``lora_A`` (random) and ``lora_B`` (zeros) beside the base weight,
        or move existing ones to its device and dtype; freeze the base weights."""
        W = self.base_layer.W
        if self.lora_A is None or self.lora_B is None:
            a_shape, b_shape, std = self.adapter_shapes()
            self.lora_A = Tensor(a_shape, W.device, W.dtype, requires_grad=True, stores_grad=True)
            self.lora_A.gaussian(0.0, std)
            self.lora_B = Tensor(b_shape, W.device, W.dtype, requires_grad=True, stores_grad=True)
        for t in self.pair():
            if t.device is not W.device:
                t.to_device(W.device)
            if t.dtype != W.dtype:
                t.to_type(W.dtype)
        self.freeze_pretrained_weight(True)

    def initialize(self, x: Tensor) -> None:
        """First call: let the base layer create (or place) its weights, then the adapters."""
        self.base_layer.ensure_initialized(x)
        self.create_adapters()

    def freeze_pretrained_weight(self, freeze: bool = True) -> None:
        """Freeze (or unfreeze) the base layer's ``W`` and ``b`` (SINGA's method; see
        :func:`set_frozen`)."""
        set_frozen((self.base_layer.W, getattr(self.base_layer, "b", None)), freeze)

    def adapters(self) -> dict[str, Tensor]:
        """``{"lora_A": ..., "lora_B": ...}`` (empty before they are created)."""
        if self.lora_A is None or self.lora_B is None:
            return {}
        return {"lora_A": self.lora_A, "lora_B": self.lora_B}

    def pair(self) -> tuple[Tensor, Tensor]:
        """``(lora_A, lora_B)``; RuntimeError before they are created."""
        if self.lora_A is None or self.lora_B is None:
            raise RuntimeError(
                f"{type(self).__name__}: the adapters do not exist yet "
                "(call the layer or compile the model first)"
            )
        return self.lora_A, self.lora_B

    # ----- running ------------------------------------------------------------------------------
    def dropout_input(self, x: Tensor) -> Tensor:
        """The adapter's input: ``x`` with dropout in training mode (when ``lora_dropout > 0``)."""
        if self.lora_dropout == 0:
            return x
        return autograd.dropout(x, self.lora_dropout, training=self.training)

    def scaled(self, h: Tensor) -> Tensor:
        """``scaling * h`` (``h`` itself when the scaling is 1)."""
        return h if self.scaling == 1 else autograd.mul(h, self.scaling)

    def forward(self, x: Tensor) -> Tensor:
        """``base(x) + adapter_output(x)``; ``base(x)`` alone once merged."""
        y = self.base_layer(x)
        if self.merged:
            return y
        return autograd.add(y, self.adapter_output(x))

    # ----- merging ------------------------------------------------------------------------------
    def merge_weights(self, mode: bool = True) -> None:
        """SINGA's switch: ``merge()`` when ``mode`` is True, else ``unmerge()``."""
        if mode:
            self.merge()
        else:
            self.unmerge()

    def merge(self) -> None:
        """Add the update into the base weight (no-op when merged already)."""
        if not self.merged:
            self._shift(+1.0)
            self.merged = True

    def unmerge(self) -> None:
        """Subtract the update from the base weight again (no-op when not merged)."""
        if self.merged:
            self._shift(-1.0)
            self.merged = False

    def _shift(self, sign: float) -> None:
        self.pair()
        W = self.base_layer.W
        W.data[...] = (W.data.astype(np.float64) + sign * self.delta_weight()).astype(W.dtype)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.base_layer!r}, r={self.r}, lora_alpha={self.lora_alpha}, "
            f"lora_dropout={self.lora_dropout}, use_rslora={self.use_rslora}, merged={self.merged})"
        )


class LinearLoRALayer(LoRALayer):
    """LoRA on a :class:`~singa.layer.Linear` (SINGA's ``LinearLoRALayer(base_layer, r=8,
    lora_alpha=1, lora_dropout=0.)``): ``y = x @ W + b + scaling * (x @ A.T) @ B.T``."""

    @classmethod
    def check_base(cls, base_layer: Any) -> None:
        """TypeError unless ``base_layer`` is a Linear."""
        if not isinstance(base_layer, Linear):
            raise TypeError(f"LinearLoRALayer: base_layer must be a Linear, got {type(base_layer).__name__}")

    @property
    def in_features(self) -> int | None:
        """The base layer's input size (None before it is known)."""
        return self.base_layer.in_features

    @property
    def out_features(self) -> int:
        """The base layer's output size."""
        return self.base_layer.out_features

    def adapter_shapes(self) -> tuple[tuple, tuple, float]:
        """(r, in_features), (out_features, r) and SINGA's std sqrt(2 / (in + out))."""
        n_in, n_out = self.base_layer.W.shape
        return (self.r, n_in), (n_out, self.r), math.sqrt(2.0 / (n_in + n_out))

    def adapter_output(self, x: Tensor) -> Tensor:
        """``scaling * (dropout(x) @ A.T) @ B.T``."""
        A, B = self.pair()
        h = autograd.matmul(self.dropout_input(x), autograd.transpose(A, (1, 0)))
        h = autograd.matmul(h, autograd.transpose(B, (1, 0)))
        return self.scaled(h)

    def delta_weight(self) -> Any:
        """``scaling * A.T @ B.T``, shape (in_features, out_features) as ``W``."""
        A, B = self.pair()
        a, b = A.data.astype(np.float64), B.data.astype(np.float64)
        return (a.T @ b.T) * self.scaling


class Conv2dLoRALayer(LoRALayer):
    """LoRA on a :class:`~singa.layer.Conv2d` with ``group == 1`` (as peft's ``Conv2d``
    adapter): ``A`` is a convolution to ``r`` channels with the base's kernel size,
    stride, padding and dilation, ``B`` a 1x1 convolution back to the output channels.
    A base with ``activation="RELU"`` applies the ReLU after the sum."""

    @classmethod
    def check_base(cls, base_layer: Any) -> None:
        """TypeError unless a Conv2d, ValueError for a grouped one."""
        if not isinstance(base_layer, Conv2d):
            raise TypeError(f"Conv2dLoRALayer: base_layer must be a Conv2d, got {type(base_layer).__name__}")
        if base_layer.group != 1:
            raise ValueError(
                f"Conv2dLoRALayer: grouped convolutions (group={base_layer.group}) are not supported"
            )

    def adapter_shapes(self) -> tuple[tuple, tuple, float]:
        """(r, in, kh, kw), (out, r, 1, 1) and std sqrt(2 / (fan_in + fan_out))."""
        n_out, n_in, kh, kw = self.base_layer.W.shape
        std = math.sqrt(2.0 / ((n_in + n_out) * kh * kw))
        return (self.r, n_in, kh, kw), (n_out, self.r, 1, 1), std

    def adapter_output(self, x: Tensor) -> Tensor:
        """``scaling * conv1x1(conv(dropout(x), A), B)``."""
        base = self.base_layer
        A, B = self.pair()
        h = autograd.conv2d(
            self.dropout_input(x),
            A,
            None,
            stride=base.stride,
            padding=base.pads_for(x),
            dilation=base.dilation,
        )
        return self.scaled(autograd.conv2d(h, B, None))

    def forward(self, x: Tensor) -> Tensor:
        """``base(x) + adapter_output(x)`` (ReLU after the sum for a RELU base)."""
        base = self.base_layer
        if self.merged:
            return base(x)
        if base.activation != "RELU":
            return autograd.add(base(x), self.adapter_output(x))
        base.ensure_initialized(x)
        y = autograd.conv2d(
            x,
            base.W,
            base.b if base.bias else None,
            stride=base.stride,
            padding=base.pads_for(x),
            dilation=base.dilation,
        )
        return autograd.relu(autograd.add(y, self.adapter_output(x)))

    def delta_weight(self) -> Any:
        """``scaling * B @ A`` reshaped to ``W``'s (out, in, kh, kw)."""
        A, B = self.pair()
        a, b = A.data.astype(np.float64), B.data.astype(np.float64)
        delta = b.reshape(b.shape[0], self.r) @ a.reshape(self.r, -1)
        return delta.reshape(self.base_layer.W.shape) * self.scaling
