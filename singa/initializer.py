"""Initializers: fill a parameter Tensor in place with random or constant values.

Every random draw comes from the generator of the tensor's device (``Tensor.gaussian``
/ ``Tensor.uniform``), so ``dev.set_rand_seed(seed)`` makes initialization reproducible.
Each function changes ``t`` in place and returns it.

Fans follow SINGA (and Keras): for a 2-D tensor, ``fan_in = shape[0]`` and
``fan_out = shape[1]`` (SINGA's ``Linear`` weight is (in_features, out_features));
for a convolution kernel (out_channels, in_channels / group, kh, kw),
``fan_in = shape[1] * kh * kw`` and ``fan_out = shape[0] * kh * kw``. Pass ``fan_in`` /
``fan_out`` explicitly where a tensor's layout differs (e.g. a transposed weight).

Names:

- SINGA's: ``he_uniform``, ``he_normal``, ``glorot_uniform``, ``glorot_normal``,
  ``lecun_uniform``, ``lecun_normal``, ``uniform(t, fan_in, fan_out)``,
  ``gaussian(t, fan_in, fan_out)``, ``xavier``, ``glorot``, ``msra``, ``eye``, ``orthogonal``;
- PyTorch's: ``kaiming_uniform`` / ``kaiming_normal`` (with ``a`` and ``nonlinearity``),
  ``xavier_uniform`` / ``xavier_normal`` (with ``gain``), ``normal``, ``constant``,
  ``zeros``, ``ones``.

Example::

    from singa import initializer, tensor
    w = tensor.Tensor((784, 100), requires_grad=True, stores_grad=True)
    initializer.he_uniform(w)                       # U(-sqrt(6/784), sqrt(6/784))
    initializer.kaiming_uniform(w, a=math.sqrt(5))  # PyTorch's Linear default
"""

from __future__ import annotations

import math

import numpy as np

from singa.tensor import Tensor

__all__ = [
    "compute_fans",
    "calculate_gain",
    "he_uniform",
    "he_normal",
    "glorot_uniform",
    "glorot_normal",
    "lecun_uniform",
    "lecun_normal",
    "kaiming_uniform",
    "kaiming_normal",
    "xavier_uniform",
    "xavier_normal",
    "uniform",
    "gaussian",
    "normal",
    "constant",
    "zeros",
    "ones",
    "xavier",
    "glorot",
    "msra",
    "eye",
    "orthogonal",
]


def compute_fans(shape: tuple) -> tuple[float, float]:
    """(fan_in, fan_out) of a weight of ``shape`` (see the module docstring)."""
    shape = tuple(int(s) for s in shape)
    if len(shape) == 0:
        return 1.0, 1.0
    if len(shape) == 1:
        return float(shape[0]), float(shape[0])
    if len(shape) == 2:
        return float(shape[0]), float(shape[1])
    rf = math.prod(shape[2:])
    return float(shape[1] * rf), float(shape[0] * rf)


def _fans(t: Tensor, fan_in: float | None, fan_out: float | None) -> tuple[float, float]:
    fi, fo = compute_fans(t.shape)
    return (fi if fan_in is None else float(fan_in)), (fo if fan_out is None else float(fan_out))


def _fan(t: Tensor, mode: str, fan_in: float | None, fan_out: float | None) -> float:
    fi, fo = _fans(t, fan_in, fan_out)
    mode = mode.lower()
    if mode == "fan_in":
        n = fi
    elif mode == "fan_out":
        n = fo
    elif mode == "fan_avg":
        n = (fi + fo) / 2.0
    else:
        raise ValueError(f"initializer: mode must be 'fan_in', 'fan_out' or 'fan_avg', got {mode!r}")
    return max(1.0, n)


def _variance_scaling(
    t: Tensor, scale: float, mode: str, distribution: str, fan_in: float | None, fan_out: float | None
) -> Tensor:
    """Keras' VarianceScaling: variance ``scale / n`` (n from ``mode``); a normal with
    that std, or a uniform on [-limit, limit] with ``limit = sqrt(3 * scale / n)``."""
    if scale <= 0:
        raise ValueError(f"initializer: scale must be positive, got {scale}")
    var = scale / _fan(t, mode, fan_in, fan_out)
    if distribution == "normal":
        return t.gaussian(0.0, math.sqrt(var))
    limit = math.sqrt(3.0 * var)
    return t.uniform(-limit, limit)


# ----- SINGA's (Keras-style) initializers -----------------------------------------------
def he_uniform(t: Tensor, *, fan_in: float | None = None, fan_out: float | None = None) -> Tensor:
    """U[-limit, limit] with ``limit = sqrt(6 / fan_in)`` (He et al. 2015)."""
    return _variance_scaling(t, 2.0, "fan_in", "uniform", fan_in, fan_out)


def he_normal(t: Tensor, *, fan_in: float | None = None, fan_out: float | None = None) -> Tensor:
    """N(0, 2 / fan_in) (He et al. 2015)."""
    return _variance_scaling(t, 2.0, "fan_in", "normal", fan_in, fan_out)


def glorot_uniform(t: Tensor, *, fan_in: float | None = None, fan_out: float | None = None) -> Tensor:
    """U[-limit, limit] with ``limit = sqrt(6 / (fan_in + fan_out))`` (Glorot & Bengio 2010)."""
    return _variance_scaling(t, 1.0, "fan_avg", "uniform", fan_in, fan_out)


def glorot_normal(t: Tensor, *, fan_in: float | None = None, fan_out: float | None = None) -> Tensor:
    """N(0, 2 / (fan_in + fan_out)) (Glorot & Bengio 2010)."""
    return _variance_scaling(t, 1.0, "fan_avg", "normal", fan_in, fan_out)


def lecun_uniform(t: Tensor, *, fan_in: float | None = None, fan_out: float | None = None) -> Tensor:
    """U[-limit, limit] with ``limit = sqrt(3 / fan_in)`` (LeCun et al. 1998)."""
    return _variance_scaling(t, 1.0, "fan_in", "uniform", fan_in, fan_out)


def lecun_normal(t: Tensor, *, fan_in: float | None = None, fan_out: float | None = None) -> Tensor:
    """N(0, 1 / fan_in) (LeCun et al. 1998)."""
    return _variance_scaling(t, 1.0, "fan_in", "normal", fan_in, fan_out)


# ----- PyTorch's initializers -------------------------------------------------------------
def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """PyTorch's recommended gain for a nonlinearity ('linear', 'conv2d', 'sigmoid',
    'tanh', 'relu', 'leaky_relu' with negative slope ``param`` (default 0.01), 'selu')."""
    n = nonlinearity.lower()
    if n in ("linear", "conv1d", "conv2d", "conv3d", "sigmoid", "identity"):
        return 1.0
    if n == "tanh":
        return 5.0 / 3.0
    if n == "relu":
        return math.sqrt(2.0)
    if n == "leaky_relu":
        a = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1.0 + a * a))
    if n == "selu":
        return 0.75
    raise ValueError(f"calculate_gain: unknown nonlinearity {nonlinearity!r}")


def kaiming_uniform(
    t: Tensor,
    a: float = 0.0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    *,
    fan_in: float | None = None,
    fan_out: float | None = None,
) -> Tensor:
    """U[-bound, bound] with ``bound = gain * sqrt(3 / fan)`` (PyTorch's
    ``kaiming_uniform_``). With ``a=sqrt(5)`` this is ``bound = 1 / sqrt(fan_in)``, the
    default of PyTorch's (and this package's) Linear and Conv2d weights."""
    gain = calculate_gain(nonlinearity, a)
    bound = gain * math.sqrt(3.0 / _fan(t, mode, fan_in, fan_out))
    return t.uniform(-bound, bound)


def kaiming_normal(
    t: Tensor,
    a: float = 0.0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    *,
    fan_in: float | None = None,
    fan_out: float | None = None,
) -> Tensor:
    """N(0, std^2) with ``std = gain / sqrt(fan)`` (PyTorch's ``kaiming_normal_``)."""
    gain = calculate_gain(nonlinearity, a)
    return t.gaussian(0.0, gain / math.sqrt(_fan(t, mode, fan_in, fan_out)))


def xavier_uniform(
    t: Tensor, gain: float = 1.0, *, fan_in: float | None = None, fan_out: float | None = None
) -> Tensor:
    """U[-bound, bound] with ``bound = gain * sqrt(6 / (fan_in + fan_out))``."""
    bound = gain * math.sqrt(3.0 / _fan(t, "fan_avg", fan_in, fan_out))
    return t.uniform(-bound, bound)


def xavier_normal(
    t: Tensor, gain: float = 1.0, *, fan_in: float | None = None, fan_out: float | None = None
) -> Tensor:
    """N(0, std^2) with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    return t.gaussian(0.0, gain / math.sqrt(_fan(t, "fan_avg", fan_in, fan_out)))


def normal(t: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    """N(mean, std^2)."""
    return t.gaussian(mean, std)


def constant(t: Tensor, value: float) -> Tensor:
    """Every element set to ``value``."""
    return t.set_value(value)


def zeros(t: Tensor) -> Tensor:
    """Every element set to 0."""
    return t.set_value(0)


def ones(t: Tensor) -> Tensor:
    """Every element set to 1."""
    return t.set_value(1)


# ----- SINGA's older initializers ---------------------------------------------------------
def uniform(t: Tensor, fan_in: float = 0, fan_out: float = 0) -> Tensor:
    """SINGA's ``uniform``: U[-x, x] with ``x = sqrt(3 * avg / (fan_in + fan_out))``,
    where ``avg`` is 2 when both fans are given and 1 when only one is (so one fan gives
    ``sqrt(3 / fan)``, both give Glorot's ``sqrt(6 / (fan_in + fan_out))``). For a plain
    range use ``t.uniform(low, high)``."""
    if fan_in <= 0 and fan_out <= 0:
        raise ValueError("uniform: fan_in and fan_out cannot both be 0")
    avg = 2 if fan_in * fan_out else 1
    x = math.sqrt(3.0 * avg / (fan_in + fan_out))
    return t.uniform(-x, x)


def gaussian(t: Tensor, fan_in: float = 0, fan_out: float = 0) -> Tensor:
    """SINGA's ``gaussian``: N(0, std^2) with ``std = sqrt(2 * avg / (fan_in + fan_out))``
    (``avg`` as in :func:`uniform`: one fan gives He's ``sqrt(2 / fan)``). For a given
    mean and std use :func:`normal` or ``t.gaussian(mean, std)``."""
    if fan_in <= 0 and fan_out <= 0:
        raise ValueError("gaussian: fan_in and fan_out cannot both be 0")
    avg = 2 if fan_in * fan_out else 1
    return t.gaussian(0.0, math.sqrt(2.0 * avg / (fan_in + fan_out)))


def xavier(t: Tensor) -> Tensor:
    """U[-s, s] with ``s = sqrt(6 / (shape[0] + shape[1]))`` (SINGA's, for matrices)."""
    s = math.sqrt(6.0 / (t.shape[0] + t.shape[1]))
    return t.uniform(-s, s)


def glorot(t: Tensor) -> Tensor:
    """N(0, 2 / (shape[0] + shape[1])) (SINGA's, for matrices)."""
    return t.gaussian(0.0, math.sqrt(2.0 / (t.shape[0] + t.shape[1])))


def msra(t: Tensor) -> Tensor:
    """N(0, 2 / shape[0]) (SINGA's, for matrices)."""
    return t.gaussian(0.0, math.sqrt(2.0 / t.shape[0]))


def eye(t: Tensor) -> Tensor:
    """Ones on the diagonal, zeros elsewhere (2-D tensors only)."""
    if t.ndim() != 2:
        raise ValueError(f"eye: needs a 2-D tensor, got shape {t.shape}")
    xp = t.device.xp
    t.data[...] = xp.eye(t.shape[0], t.shape[1], dtype=t.dtype)
    return t


def orthogonal(t: Tensor, gain: float = 1.0) -> Tensor:
    """A (semi-)orthogonal matrix times ``gain`` (Saxe et al. 2013), from the QR
    decomposition of a Gaussian matrix drawn on the tensor's device. Tensors with more
    than 2 dims are treated as (shape[0], prod(shape[1:]))."""
    if t.ndim() < 2:
        raise ValueError(f"orthogonal: needs at least 2 dims, got shape {t.shape}")
    rows, cols = t.shape[0], math.prod(t.shape[1:])
    xp = t.device.xp
    g = Tensor((max(rows, cols), min(rows, cols)), t.device, np.float64, requires_grad=False)
    g.gaussian(0.0, 1.0)
    q, r = xp.linalg.qr(g.data)
    d = xp.sign(xp.diagonal(r))
    d = xp.where(d == 0, 1.0, d)
    q = q * d  # makes the decomposition unique, so q is uniformly distributed
    if rows < cols:
        q = q.T
    t.data[...] = (gain * q).reshape(t.shape).astype(t.dtype)
    return t
