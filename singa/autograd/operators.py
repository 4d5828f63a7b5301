"""SINGA's operator classes under SINGA's names and constructor signatures.

SINGA code builds operators as ``autograd.Xxx(*hyperparameters)(*inputs)[0]``. Where
our operator class takes the same constructor arguments it is exported here under
SINGA's name (``Matmul`` is :class:`~singa.autograd.linalg.MatMul`, ``SeLU`` is
:class:`~singa.autograd.activation.Selu`, ...). Where SINGA's constructor differs
(targets, indices or conditions given to the constructor, SINGA's argument forms) a
thin class stores SINGA's arguments and, when called, runs our checked function; the
result's ``creator`` is then our operator, whose ``backward`` SINGA's tests call.

The classes of the new operator families (``Sin``, ``Greater``, ``Max``, ``OneHot``,
...) are exported by their own modules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import singa.autograd.activation as activation
import singa.autograd.elementwise as elementwise
import singa.autograd.indexing as indexing
import singa.autograd.linalg as linalg
import singa.autograd.loss as loss
import singa.autograd.pooling as pooling
import singa.autograd.reduction as reduction
import singa.autograd.shaping as shaping
from singa.autograd.dropout import dropout as dropout_fn  # the package's ``dropout`` is this function
from singa.tensor import Tensor

__all__ = [
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Abs",
    "Exp",
    "Log",
    "Sqrt",
    "Sign",
    "Clip",
    "Sigmoid",
    "Tanh",
    "SoftMax",
    "SoftPlus",
    "SoftSign",
    "Elu",
    "SeLU",
    "LeakyRelu",
    "HardSigmoid",
    "PRelu",
    "Matmul",
    "AddBias",
    "Gemm",
    "CosSim",
    "Reshape",
    "Transpose",
    "Expand",
    "Pad",
    "RankingLoss",
    "Concat",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Split",
    "Slice",
    "Gather",
    "Where",
    "ScatterElements",
    "Tile",
    "ReduceSum",
    "ReduceMean",
    "Dropout",
    "GlobalAveragePool",
    "MeanSquareError",
    "CrossEntropy",
    "SoftMaxCrossEntropy",
    "BinaryCrossEntropy",
]

# ----- our classes under SINGA's names (same constructor arguments) -----------------------
Add, Sub, Mul, Div, Pow = elementwise.Add, elementwise.Sub, elementwise.Mul, elementwise.Div, elementwise.Pow
Abs, Exp, Log, Sqrt, Sign = (
    elementwise.Abs,
    elementwise.Exp,
    elementwise.Log,
    elementwise.Sqrt,
    elementwise.Sign,
)
Clip = elementwise.Clip
Sigmoid, Tanh, SoftMax = activation.Sigmoid, activation.Tanh, activation.SoftMax
SoftPlus, SoftSign, Elu = activation.SoftPlus, activation.SoftSign, activation.Elu
SeLU, LeakyRelu, HardSigmoid, PRelu = (
    activation.Selu,
    activation.LeakyReLU,
    activation.HardSigmoid,
    activation.PRelu,
)
Matmul, AddBias, Gemm, CosSim = linalg.MatMul, linalg.AddBias, linalg.Gemm, linalg.CosSim
Reshape, Transpose, Expand, Pad = shaping.Reshape, shaping.Transpose, shaping.Expand, shaping.Pad
RankingLoss = loss.RankingLoss


class _Adapter:
    """Base of the thin classes: ``op(*inputs)`` returns a tuple of output Tensors, as
    an Operation's call does, computed by :meth:`run`."""

    def __call__(self, *xs: Tensor) -> tuple:
        y = self.run(*xs)
        return y if isinstance(y, tuple) else (y,)

    def run(self, *xs: Tensor) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


# ----- joins, shapes and indexing ----------------------------------------------------------
class Concat(_Adapter):
    """``Concat(axis=0)(*xs)``: :func:`~singa.autograd.shaping.cat` (negative axes too)."""

    def __init__(self, axis: int = 0):
        self.axis = axis

    def run(self, *xs):
        return shaping.cat(xs, self.axis)


class Flatten(_Adapter):
    """``Flatten(axis=1)(x)``: :func:`~singa.autograd.shaping.flatten`."""

    def __init__(self, axis: int = 1):
        self.axis = axis

    def run(self, x):
        return shaping.flatten(x, self.axis)


class Squeeze(_Adapter):
    """``Squeeze(axis=[])(x)``: remove the listed size-1 axes (all of them for [])."""

    def __init__(self, axis: int | Sequence[int] = ()):
        self.axis = axis

    def run(self, x):
        empty = not isinstance(self.axis, int) and len(self.axis) == 0
        return shaping.squeeze(x, None if empty else self.axis)


class Unsqueeze(_Adapter):
    """``Unsqueeze(axis)(x)``: :func:`~singa.autograd.shaping.unsqueeze`."""

    def __init__(self, axis: int | Sequence[int]):
        self.axis = axis

    def run(self, x):
        return shaping.unsqueeze(x, self.axis)


class Split(_Adapter):
    """``Split(axis, parts, num_output=None)(x)``: a tuple of pieces; ``parts`` None
    with ``num_output`` n cuts n equal pieces."""

    def __init__(self, axis: int, parts: Sequence[int] | None, num_output: int | None = None):
        self.axis, self.parts, self.num_output = axis, parts, num_output

    def run(self, x):
        return shaping.split(x, self.axis, self.num_output if self.parts is None else self.parts)


class Slice(_Adapter):
    """``Slice(starts, ends, axes=None, steps=None)(x)``: ONNX Slice."""

    def __init__(self, starts: Sequence[int], ends: Sequence[int], axes: Any = None, steps: Any = None):
        self.starts, self.ends, self.axes, self.steps = starts, ends, axes, steps

    def run(self, x):
        return shaping.slice(x, self.starts, self.ends, self.axes, self.steps)


class Gather(_Adapter):
    """``Gather(axis, indices)(x)``: the entries ``indices`` of x along ``axis``."""

    def __init__(self, axis: int, indices: Any):
        self.axis, self.indices = axis, indices

    def run(self, x):
        return indexing.gather(x, self.axis, self.indices)


class Where(_Adapter):
    """``Where(condition)(x, y)``: x where condition else y."""

    def __init__(self, condition: Any):
        self.condition = condition

    def run(self, x, y):
        return indexing.where(x, y, self.condition)


class ScatterElements(_Adapter):
    """``ScatterElements(indices, updates, axis=0)(x)``: ONNX ScatterElements."""

    def __init__(self, indices: Any, updates: Any, axis: int = 0):
        self.indices, self.updates, self.axis = indices, updates, axis

    def run(self, x):
        return indexing.scatter_elements(x, self.indices, self.updates, self.axis)


class Tile(_Adapter):
    """``Tile(repeats)(x)``: :func:`~singa.autograd.shaping.tile`."""

    def __init__(self, repeats: int | Sequence[int]):
        self.repeats = repeats

    def run(self, x):
        return shaping.tile(x, self.repeats)


# ----- reductions, pooling, dropout --------------------------------------------------------
class ReduceSum(_Adapter):
    """``ReduceSum(axes=None, keepdims=1)(x)``: ONNX ReduceSum."""

    def __init__(self, axes: Any = None, keepdims: int = 1):
        self.axes, self.keepdims = axes, keepdims

    def run(self, x):
        return reduction.reduce_sum(x, self.axes, self.keepdims)


class ReduceMean(ReduceSum):
    """``ReduceMean(axes=None, keepdims=1)(x)``: ONNX ReduceMean."""

    def run(self, x):
        return reduction.reduce_mean(x, self.axes, self.keepdims)


class Dropout(_Adapter):
    """``Dropout(seed=0, ratio=0.5)(x)``: dropout while ``autograd.training`` is True.
    SINGA's ``seed`` is accepted and unused: the device's generator draws the mask
    (seed it with ``device.set_rand_seed``)."""

    def __init__(self, seed: int = 0, ratio: float = 0.5):
        self.seed, self.ratio = seed, ratio

    def run(self, x):
        return dropout_fn(x, self.ratio)


class GlobalAveragePool(_Adapter):
    """``GlobalAveragePool(data_format='channels_first')(x)``."""

    def __init__(self, data_format: str = "channels_first"):
        self.data_format = data_format

    def run(self, x):
        return pooling.globalaveragepool(x, self.data_format)


# ----- losses with the target given to the constructor ----------------------------------------
class _TargetLoss(_Adapter):
    """SINGA's loss classes: ``Loss(t)(x)``."""

    fn: Any = None

    def __init__(self, t: Tensor):
        self.t = t

    def run(self, x):
        return type(self).fn(x, self.t)


class MeanSquareError(_TargetLoss):
    """``MeanSquareError(t)(x)``: :func:`~singa.autograd.loss.mse_loss`."""

    fn = staticmethod(loss.mse_loss)


class CrossEntropy(_TargetLoss):
    """``CrossEntropy(t)(x)``: :func:`~singa.autograd.loss.cross_entropy`."""

    fn = staticmethod(loss.cross_entropy)


class SoftMaxCrossEntropy(_TargetLoss):
    """``SoftMaxCrossEntropy(t)(x)``: :func:`~singa.autograd.loss.softmax_cross_entropy`."""

    fn = staticmethod(loss.softmax_cross_entropy)


class BinaryCrossEntropy(_TargetLoss):
    """``BinaryCrossEntropy(t)(x)``: :func:`~singa.autograd.loss.binary_cross_entropy`."""

    fn = staticmethod(loss.binary_cross_entropy)
