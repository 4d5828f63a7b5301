"""Dense layers: Linear, Gemm (ONNX) and Embedding."""

from __future__ import annotations

import math
from typing import Any

from singa import autograd, initializer
from singa.layer._util import adopt, new_param
from singa.layer.base import Layer
from singa.tensor import Tensor

__all__ = ["Linear", "Gemm", "Embedding"]


class Linear(Layer):
    """Fully connected layer: ``y = x @ W + b`` with ``W`` of shape
    (in_features, out_features) and ``b`` of shape (out_features,).

    Forms (SINGA's):

    - ``Linear(out_features, bias=True)``: ``W`` and ``b`` are created on the first call
      from the input's last dim, on its device and with its float dtype;
    - ``Linear(in_features, out_features[, bias])`` (the legacy positional form):
      created now (default device, float32) and moved to the first input's device and
      float dtype on the first call.

    Defaults follow PyTorch: ``W ~ U(-1/sqrt(in), 1/sqrt(in))`` (kaiming_uniform with
    a=sqrt(5)), ``b ~ U(-1/sqrt(in), 1/sqrt(in))``. Inputs may have any number of leading
    dims (the product is taken over the last one).
    """

    def __init__(self, out_features: int, *args: Any, bias: bool = True, name: str | None = None):
        super().__init__(name)
        in_features = None
        if len(args) > 2:
            raise TypeError(f"Linear: too many positional arguments {(out_features,) + args}")
        if args:  # legacy Linear(in_features, out_features[, bias])
            in_features, out_features = out_features, args[0]
            if len(args) > 1:
                bias = args[1]
        self.in_features = in_features
        self.out_features = int(out_features)
        self.bias = bool(bias)
        self.W: Tensor | None = None
        self.b: Tensor | None = None
        if in_features is not None:
            self._create(None)

    def _create(self, x: Tensor | None) -> None:
        n_in = int(self.in_features)
        self.W = new_param((n_in, self.out_features), x)
        initializer.kaiming_uniform(self.W, a=math.sqrt(5), fan_in=n_in)
        if self.bias:
            self.b = new_param((self.out_features,), x)
            bound = 1.0 / math.sqrt(n_in) if n_in > 0 else 0.0
            self.b.uniform(-bound, bound)

    def initialize(self, x: Tensor) -> None:
        """Create ``W`` and ``b`` from ``x.shape[-1]`` (or adopt x's device and dtype)."""
        if self.W is None:
            self.in_features = x.shape[-1]
            self._create(x)
        else:
            adopt((self.W, self.b), x)

    def forward(self, x: Tensor) -> Tensor:
        """``x @ W + b``."""
        if x.ndim() < 1 or x.shape[-1] != self.in_features:
            raise ValueError(f"Linear: expected input with last dim {self.in_features}, got shape {x.shape}")
        y = autograd.matmul(x, self.W)
        if self.bias:
            y = autograd.add_bias(y, self.b, axis=0) if y.ndim() == 2 else autograd.add(y, self.b)
        return y

    def __repr__(self) -> str:
        return f"Linear(in_features={self.in_features}, out_features={self.out_features}, bias={self.bias})"


class Gemm(Layer):
    """ONNX Gemm as a layer: ``y = alpha * x' @ W' + beta * b`` with ``x' = x.T`` when
    ``transA`` and ``W' = W.T`` when ``transB`` (SINGA's signature).

    ``W`` has shape (nb_kernels, in_features) when ``transB`` (the default, as ONNX
    exporters write it) and (in_features, nb_kernels) otherwise; ``b`` has shape
    ``bias_shape`` (default (1, nb_kernels)). Created on the first call from the input,
    initialised as :class:`Linear` (kaiming_uniform(a=sqrt(5)) and U(+-1/sqrt(in))).
    """

    def __init__(
        self,
        nb_kernels: int,
        alpha: float = 1.0,
        beta: float = 1.0,
        transA: bool = False,
        transB: bool = True,
        bias: bool = True,
        bias_shape: tuple | None = None,
        name: str | None = None,
    ):
        super().__init__(name)
        self.nb_kernels = int(nb_kernels)
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.transA = bool(transA)
        self.transB = bool(transB)
        self.bias = bool(bias)
        self.bias_shape = None if bias_shape is None else tuple(bias_shape)
        self.in_features: int | None = None
        self.W: Tensor | None = None
        self.b: Tensor | None = None

    def initialize(self, x: Tensor) -> None:
        """Create ``W`` and ``b`` from the input's feature dim."""
        if x.ndim() != 2:
            raise ValueError(f"Gemm: expected a 2-D input, got shape {x.shape}")
        n_in = x.shape[0] if self.transA else x.shape[1]
        self.in_features = n_in
        w_shape = (self.nb_kernels, n_in) if self.transB else (n_in, self.nb_kernels)
        self.W = new_param(w_shape, x)
        initializer.kaiming_uniform(self.W, a=math.sqrt(5), fan_in=n_in)
        if self.bias:
            self.b = new_param(self.bias_shape or (1, self.nb_kernels), x)
            bound = 1.0 / math.sqrt(n_in) if n_in > 0 else 0.0
            self.b.uniform(-bound, bound)

    def forward(self, x: Tensor) -> Tensor:
        """``alpha * x' @ W' + beta * b``."""
        return autograd.gemm(x, self.W, self.b, self.alpha, self.beta, self.transA, self.transB)


class Embedding(Layer):
    """Lookup table: ``y[..., :] = W[x[...], :]`` for integer indices ``x``; ``W`` has
    shape (input_dim, output_dim) and receives the gradient (rows used several times add
    up). SINGA's signature; ``initializer`` is "gaussian" (N(0, 1), PyTorch's default) or
    "uniform" (U(-1, 1)). ``W`` is created now (float32 on the default device) and moved
    to the device of the first input on the first call.
    """

    def __init__(
        self, input_dim: int, output_dim: int, initializer: str = "gaussian", name: str | None = None
    ):
        super().__init__(name)
        if initializer not in ("gaussian", "uniform"):
            raise ValueError(f"Embedding: initializer must be 'gaussian' or 'uniform', got {initializer!r}")
        self.input_dim = int(input_dim)
        self.output_dim = int(output_dim)
        self.initializer = initializer
        self.W = new_param((self.input_dim, self.output_dim))
        if initializer == "uniform":
            self.W.uniform(-1.0, 1.0)
        else:
            self.W.gaussian(0.0, 1.0)

    def initialize(self, x: Tensor) -> None:
        """Move ``W`` to the input's device (its dtype stays: the input holds indices)."""
        if self.W.device is not x.device:
            self.W.to_device(x.device)

    def from_pretrained(self, W: Any, freeze: bool = True) -> None:
        """Copy a table of shape (input_dim, output_dim) (a Tensor or an array, cast to
        W's dtype) into ``W``, in place; with ``freeze`` W gets no gradient from now on
        (it stays among the parameters, as in SINGA), without it W trains."""
        src = W.data if isinstance(W, Tensor) else W
        shape = tuple(getattr(src, "shape", ()))
        if shape != self.W.shape:
            raise ValueError(
                f"Embedding.from_pretrained: W of shape {shape} does not fit the table {self.W.shape}"
            )
        self.W.copy_from(src)
        self.W.requires_grad = not freeze

    def forward(self, x: Tensor) -> Tensor:
        """Rows of ``W`` picked by the integer indices in ``x``: shape x.shape + (output_dim,)."""
        return autograd.embedding(x, self.W)
