"""Activation functions.

All are numerically stable over the whole float range (no overflow for large |x|)
and keep the input's floating dtype.

``relu`` is on the hot path of every network: forward is ``np.maximum(x, 0)`` and
backward keeps the output (``dy * (y > 0)``): no extra memory (the next operator keeps
the output alive anyway) and exact, where a float mask would be barely faster, cost 4
bytes per element more and make relu(-inf) nan (the measurements: ``bench/README.md``,
"Design measurements").
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from singa.autograd.engine import Operation, check_same_dtype, unbroadcast
from singa.device import array_module
from singa.kernels import relu as relu_kernels
from singa.kernels import workers
from singa.kernels.buffers import pooled_out
from singa.kernels.gelu import gelu_exact, gelu_exact_grad, gelu_float32, gelu_float32_grad
from singa.kernels.jit import takes_floats
from singa.tensor import Tensor

__all__ = [
    "relu",
    "leakyrelu",
    "elu",
    "selu",
    "sigmoid",
    "tanh",
    "softplus",
    "softsign",
    "gelu",
    "hardsigmoid",
    "softmax",
    "log_softmax",
    "prelu",
]

_SQRT1_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


class ReLU(Operation):
    """y = max(x, 0); gradient 1 where x > 0 (0 at x == 0). Keeps y for backward.

    On the CPU (float32/float64 and integer arrays) both directions are compiled
    one-pass kernels (:mod:`singa.kernels.relu`) run over pieces of memory on
    the worker threads; elsewhere (a GPU, float16) array expressions with the same
    results.
    """

    def forward(self, x):
        xp = array_module(x)
        out = pooled_out(xp, x)  # pooled: no fresh pages each step
        if _compiled(x):
            y = out if out is not None else np.empty_like(x)
            workers.run_flat(relu_kernels.relu, y, x)
        else:
            y = xp.maximum(x, 0, out=out)
        self.output_computed(y)
        return y

    def output_computed(self, y) -> None:
        """The forward's bookkeeping without the work, for a graph whose fused kernel
        wrote the rectified ``y`` already (:mod:`singa.model.training_fusion`): what the
        backward reads."""
        if self.requires_grad:
            self.cache = y

    def backward(self, dy):
        xp = array_module(dy)
        out = pooled_out(xp, dy)
        if not _compiled(dy):
            return xp.multiply(dy, self.cache > 0, out=out)
        dx = out if out is not None else np.empty_like(dy)
        workers.run_flat(relu_kernels.relu_grad, dx, dy, self.cache)
        return dx

    def _forward_into_x(self, x):
        if _compiled(x):
            workers.run_flat(relu_kernels.relu_in_place, x)
        else:
            array_module(x).maximum(x, 0, out=x)
        if self.requires_grad:
            self.cache = x
        return x

    def _backward_into_dy(self, dy):
        if _compiled(dy):
            workers.run_flat(relu_kernels.relu_grad_in_place, dy, self.cache)
        else:
            dy *= self.cache > 0
        return dy

    forward_inplace = ((_forward_into_x, 0),)
    backward_inplace = ((_backward_into_dy, 0),)


def _compiled(a: Any) -> bool:
    """Whether ReLU's compiled kernels (:mod:`singa.kernels.relu`) take ``a``."""
    return isinstance(a, np.ndarray) and a.dtype.kind in "fiu" and a.dtype != np.float16


class LeakyReLU(Operation):
    """y = x where x > 0, a * x elsewhere."""

    def __init__(self, a: float = 0.01):
        super().__init__()
        self.a = a

    def forward(self, x):
        slope = (x > 0).astype(x.dtype)
        slope *= 1 - self.a
        slope += self.a
        if self.requires_grad:
            self.cache = slope
        return x * slope

    def backward(self, dy):
        return dy * self.cache


class Elu(Operation):
    """y = x where x > 0, alpha * (exp(x) - 1) elsewhere, times ``scale`` (1 for ELU)."""

    def __init__(self, alpha: float = 1.0, scale: float = 1.0):
        super().__init__()
        self.alpha = alpha
        self.scale = scale

    def forward(self, x):
        xp = array_module(x)
        k = self.alpha * self.scale
        neg = xp.expm1(xp.minimum(x, 0))
        neg *= k  # k * (exp(min(x, 0)) - 1): 0 where x > 0
        y = xp.maximum(x, 0)
        if self.scale != 1.0:
            y *= self.scale
        y += neg
        if self.requires_grad:
            # dy/dx = scale where x > 0, k * exp(x) = neg + k elsewhere
            d = (x > 0).astype(x.dtype)
            d *= self.scale - k
            d += neg
            d += k
            self.cache = d
        return y

    def backward(self, dy):
        return dy * self.cache


class Selu(Elu):
    """y = gamma * (x where x > 0, alpha * (exp(x) - 1) elsewhere)."""

    def __init__(self, alpha: float = 1.67326324, gamma: float = 1.05070098):
        super().__init__(alpha, gamma)
        self.gamma = gamma


def _sigmoid(x):
    """1 / (1 + exp(-x)) without overflow warnings: exp(-x) = inf gives exactly 0."""
    xp = array_module(x)
    with np.errstate(over="ignore"):
        e = xp.exp(-x)
    e += 1
    return 1 / e


class Sigmoid(Operation):
    """y = 1 / (1 + exp(-x))."""

    def forward(self, x):
        y = _sigmoid(x)
        if self.requires_grad:
            self.cache = y
        return y

    def backward(self, dy):
        y = self.cache
        return dy * y * (1 - y)


class Tanh(Operation):
    """y = tanh(x)."""

    def forward(self, x):
        y = array_module(x).tanh(x)
        if self.requires_grad:
            self.cache = y
        return y

    def backward(self, dy):
        y = self.cache
        return dy * (1 - y * y)


class SoftPlus(Operation):
    """y = log(1 + exp(x)), computed as max(x, 0) + log1p(exp(-|x|))."""

    def forward(self, x):
        xp = array_module(x)
        if self.requires_grad:
            self.cache = x
        y = xp.log1p(xp.exp(-xp.abs(x)))
        y += xp.maximum(x, 0)
        return y

    def backward(self, dy):
        return dy * _sigmoid(self.cache)


class SoftSign(Operation):
    """y = x / (1 + |x|)."""

    def forward(self, x):
        d = array_module(x).abs(x)
        d += 1
        if self.requires_grad:
            self.cache = d
        return x / d

    def backward(self, dy):
        d = self.cache
        return dy / (d * d)


# ----- erf for the exact GELU ------------------------------------------------------------
# Rational approximations of erf / erfc from the Cephes Math Library (ndtr.c, S. L.
# Moshier, public domain): erf(z) = z T(z^2) / U(z^2) for |z| < 1; erfc(z) =
# exp(-z^2) P(z) / Q(z) for 1 <= z < 8 and exp(-z^2) R(z) / S(z) for z >= 8 (U, Q, S
# are monic; their leading 1 is left out). Relative error about 1e-16 in float64.
_T = (9.60497373987051638749e0, 9.00260197203842689217e1, 2.23200534594684319226e3,
      7.00332514112805075473e3, 5.55923013010394962768e4)  # fmt: skip
_U = (3.35617141647503099647e1, 5.21357949780152679795e2, 4.59432382970980127987e3,
      2.26290000613890934246e4, 4.92673942608635921086e4)  # fmt: skip
_P = (2.46196981473530512524e-10, 5.64189564831068821977e-1, 7.46321056442269912687e0,
      4.86371970985681366614e1, 1.96520832956077098242e2, 5.26445194995477358631e2,
      9.34528527171957607540e2, 1.02755188689515710272e3, 5.57535335369399327526e2)  # fmt: skip
_Q = (1.32281951154744992508e1, 8.67072140885989742329e1, 3.54937778887819891062e2,
      9.75708501743205489753e2, 1.82390916687909736289e3, 2.24633760818710981792e3,
      1.65666309194161350182e3, 5.57535340817727675546e2)  # fmt: skip
_R = (5.64189583547755073984e-1, 1.27536670759978104416e0, 5.01905042251180477414e0,
      6.16021097993053585195e0, 7.40974269950448939160e0, 2.97886665372100240670e0)  # fmt: skip
_S = (2.26052863220117276590e0, 9.39603524938001434673e0, 1.20489539808096656605e1,
      1.70814450747565897222e1, 9.60896809063285878198e0, 3.36907645100081516050e0)  # fmt: skip


def _polyval(z, coef, monic=False):
    """Horner's rule; ``monic`` adds a leading coefficient 1 before ``coef``."""
    if monic:
        p = z + coef[0]
    else:
        p = z * coef[0]
        p += coef[1]
        coef = coef[1:]
    for c in coef[1:]:
        p *= z
        p += c
    return p


def _erf_parts(z):
    """For z >= 0: (w, erf(z) for z < 1, erfc(z) for z >= 1), w = 1.0 where z < 1 else 0.

    Every branch is evaluated on the whole array (each is finite everywhere once z is
    capped) and the caller blends them by multiplying with w and 1 - w, which selects
    exactly; np.where with an unpredictable mask is about 10x slower on the CPU.
    """
    xp = array_module(z)
    z = xp.minimum(z, 27.0)  # erfc(27) underflows to 0 in float64; keeps z**2 finite
    z2 = z * z
    w = (z < 1).astype(z.dtype)
    e_small = z * _polyval(z2, _T)
    e_small /= _polyval(z2, _U, monic=True)
    ex = xp.exp(-z2)
    c_big = ex * _polyval(z, _P)
    c_big /= _polyval(z, _Q, monic=True)
    far = z >= 8
    if far.any():
        c_far = ex * _polyval(z, _R)
        c_far /= _polyval(z, _S, monic=True)
        far = far.astype(z.dtype)
        c_big *= 1 - far
        c_big += far * c_far
    return w, e_small, c_big


def erf(x):
    """The error function of a numpy or cupy array, elementwise (absolute error below
    1e-15 in float64, relative error about 1e-16). Not an operator: GELU uses it."""
    xp = array_module(x)
    w, e_small, c_big = _erf_parts(xp.abs(x))
    e = e_small * w
    e += (1 - c_big) * (1 - w)
    return xp.sign(x) * e


def _normal_cdf(x):
    """Phi(x) = (1 + erf(x / sqrt 2)) / 2, relatively accurate in the lower tail."""
    xp = array_module(x)
    w, e_small, c_big = _erf_parts(xp.abs(x) * _SQRT1_2)
    q = (1 - e_small) * w  # q = erfc(|x| / sqrt 2) / 2 = Phi(-|x|)
    q += c_big * (1 - w)
    q *= 0.5
    pos = (x >= 0).astype(q.dtype)  # Phi(x) = 1 - q for x >= 0, q for x < 0
    cdf = (1 - q) * pos
    cdf += q * (1 - pos)
    return cdf


class Gelu(Operation):
    """y = x * Phi(x), Phi the standard normal CDF (``approximate="none"``), or its tanh
    approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (``"tanh"``)."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        xp = array_module(x)
        xc = x.astype(np.float32) if x.dtype.itemsize < 4 else x  # float16: compute in float32
        if self.approximate == "tanh":
            inner = xc * xc
            inner *= 0.044715
            inner += 1
            inner *= xc
            inner *= _SQRT_2_OVER_PI
            t = xp.tanh(inner)
            y = (t + 1) * xc * 0.5
            if self.requires_grad:
                self.cache = (xc, t)
        elif takes_floats(x):  # the compiled kernel (singa.kernels.gelu)
            x = x if x.flags.c_contiguous else x.copy()  # cdf is written through views of it
            y, cdf = np.empty_like(x), np.empty_like(x)
            workers.run_flat(gelu_float32 if x.dtype == np.float32 else gelu_exact, y, x, cdf)
            if self.requires_grad:
                self.cache = (x, (cdf,))
        else:
            cdf = _normal_cdf(xc)
            y = xc * cdf
            if self.requires_grad:
                self.cache = (xc, cdf)
        return y.astype(x.dtype, copy=False)

    def backward(self, dy):
        xp = array_module(dy)
        x, aux = self.cache
        if self.approximate == "tanh":
            t = aux
            x2 = x * x
            d = (1 - t * t) * x * (_SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x2))
            d += 1 + t
            d *= 0.5
        elif isinstance(aux, tuple):  # the compiled forward's Phi(x)
            dx = np.empty_like(x)
            grad = gelu_float32_grad if x.dtype == np.float32 else gelu_exact_grad
            workers.run_flat(grad, dx, dy.astype(x.dtype, copy=False), x, aux[0])
            return dx.astype(dy.dtype, copy=False)
        else:
            with np.errstate(over="ignore"):
                pdf = xp.exp(x * x * -0.5)
            pdf *= _INV_SQRT_2PI
            d = x * pdf
            d += aux
        return (dy * d).astype(dy.dtype, copy=False)


class HardSigmoid(Operation):
    """y = max(0, min(1, alpha * x + beta)) (ONNX HardSigmoid); gradient alpha where
    0 < alpha * x + beta < 1, 0 elsewhere (including the two corners)."""

    def __init__(self, alpha: float = 0.2, beta: float = 0.5):
        super().__init__()
        self.alpha = alpha
        self.beta = beta

    def forward(self, x):
        xp = array_module(x)
        z = x * self.alpha
        z += self.beta
        if self.requires_grad:
            m = z > 0
            m &= z < 1
            self.cache = m
        return xp.minimum(xp.maximum(z, 0), 1)

    def backward(self, dy):
        g = dy * self.cache
        g *= self.alpha
        return g


class SoftMax(Operation):
    """y = exp(x) / sum(exp(x)) along ``axis`` (shifted by the max for stability)."""

    def __init__(self, axis: int = 1):
        super().__init__()
        self.axis = axis

    def forward(self, x):
        xp = array_module(x)
        e = x - x.max(axis=self.axis, keepdims=True)
        xp.exp(e, out=e)
        e /= e.sum(axis=self.axis, keepdims=True)
        if self.requires_grad:
            self.cache = e
        return e

    def backward(self, dy):
        y = self.cache
        g = dy * y
        g -= y * g.sum(axis=self.axis, keepdims=True)
        return g


class LogSoftMax(Operation):
    """y = x - log(sum(exp(x))) along ``axis`` (shifted by the max for stability)."""

    def __init__(self, axis: int = 1):
        super().__init__()
        self.axis = axis

    def forward(self, x):
        xp = array_module(x)
        y = x - x.max(axis=self.axis, keepdims=True)
        y -= xp.log(xp.exp(y).sum(axis=self.axis, keepdims=True))
        if self.requires_grad:
            self.cache = y
        return y

    def backward(self, dy):
        g = array_module(dy).exp(self.cache)
        g *= -dy.sum(axis=self.axis, keepdims=True)
        g += dy
        return g


class PRelu(Operation):
    """y = x where x > 0, slope * x elsewhere, with a learned ``slope`` that broadcasts
    with x (ONNX PRelu). Gradients: dx = 1 where x > 0, slope elsewhere (so ``slope`` at
    x == 0, as leakyrelu and PyTorch); dslope = x where x <= 0, summed to its shape."""

    def forward(self, x, slope):
        neg = x <= 0
        y = x * array_module(x).where(neg, slope, 1).astype(x.dtype, copy=False)
        if self.requires_grad:
            self.cache = (x, slope, neg)
        return y

    def backward(self, dy):
        x, slope, neg = self.cache
        dx = dslope = None
        if self.needs_grad[0]:
            dx = dy * array_module(dy).where(neg, slope, 1)
            dx = unbroadcast(dx, x.shape).astype(x.dtype, copy=False)
        if self.needs_grad[1]:
            dslope = unbroadcast(dy * x * neg, slope.shape)
        return dx, dslope


# ----- public functions ----------------------------------------------------------------
def _floating(name: str, x: Tensor) -> None:
    """Raise ValueError naming ``name`` and the dtype unless ``x`` is floating point (one
    dtype-kind test per call; non-Tensors are left to ``Operation.__call__``)."""
    if isinstance(x, Tensor) and x.data.dtype.kind != "f":
        check_same_dtype(name, x, floating=True)


def _axis(name: str, x: Tensor, axis: int) -> int:
    nd = x.data.ndim
    if not -nd <= axis < nd:
        raise ValueError(f"{name}: axis {axis} is out of range for x of shape {x.shape}")
    return axis % nd


def relu(x: Tensor) -> Tensor:
    """Rectified linear unit, max(x, 0); the gradient at 0 is 0."""
    _floating("relu", x)
    return ReLU()(x)[0]


def leakyrelu(x: Tensor, a: float = 0.01) -> Tensor:
    """x where x > 0, ``a * x`` elsewhere (SINGA's LeakyRelu)."""
    _floating("leakyrelu", x)
    return LeakyReLU(a)(x)[0]


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """x where x > 0, ``alpha * (exp(x) - 1)`` elsewhere."""
    _floating("elu", x)
    return Elu(alpha)(x)[0]


def selu(x: Tensor, alpha: float = 1.67326324, gamma: float = 1.05070098) -> Tensor:
    """Scaled ELU: ``gamma * x`` where x > 0, ``gamma * alpha * (exp(x) - 1)`` elsewhere."""
    _floating("selu", x)
    return Selu(alpha, gamma)(x)[0]


def sigmoid(x: Tensor) -> Tensor:
    """The logistic function 1 / (1 + exp(-x))."""
    _floating("sigmoid", x)
    return Sigmoid()(x)[0]


def tanh(x: Tensor) -> Tensor:
    """Hyperbolic tangent."""
    _floating("tanh", x)
    return Tanh()(x)[0]


def softplus(x: Tensor) -> Tensor:
    """log(1 + exp(x)), computed without overflow; its gradient is sigmoid(x)."""
    _floating("softplus", x)
    return SoftPlus()(x)[0]


def softsign(x: Tensor) -> Tensor:
    """x / (1 + |x|)."""
    _floating("softsign", x)
    return SoftSign()(x)[0]


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """Gaussian error linear unit, x * Phi(x).

    ``approximate="none"`` uses the exact normal CDF (through a vectorised erf accurate
    to about 1e-16 in float64); ``"tanh"`` uses 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
    x^3))). Both match PyTorch's ``gelu``; float16 is computed in float32.
    """
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    _floating("gelu", x)
    return Gelu(approximate)(x)[0]


def hardsigmoid(x: Tensor, alpha: float = 0.2, gamma: float = 0.5, *, beta: float | None = None) -> Tensor:
    """max(0, min(1, alpha * x + gamma)), as ONNX HardSigmoid defines it (SINGA's
    signature; ``beta``, ONNX's name for ``gamma``, is accepted as a keyword alias)."""
    if beta is not None:
        if gamma != 0.5 and gamma != beta:
            raise ValueError(f"hardsigmoid: gamma={gamma} and beta={beta} are the same argument; give one")
        gamma = beta
    _floating("hardsigmoid", x)
    return HardSigmoid(alpha, gamma)(x)[0]


def softmax(x: Tensor, axis: int = 1) -> Tensor:
    """exp(x) / sum(exp(x)) along ``axis`` (negative axes count from the end)."""
    _floating("softmax", x)
    return SoftMax(_axis("softmax", x, axis))(x)[0]


def log_softmax(x: Tensor, axis: int = 1) -> Tensor:
    """log(softmax(x)) along ``axis``, computed stably (negative axes count from the end)."""
    _floating("log_softmax", x)
    return LogSoftMax(_axis("log_softmax", x, axis))(x)[0]


def prelu(x: Tensor, slope: Tensor) -> Tensor:
    """Parametric ReLU: x where x > 0, slope * x elsewhere. ``slope`` (a Tensor, usually
    a learned parameter, of x's dtype) broadcasts with x, e.g. (C, 1, 1) for a
    per-channel slope of (N, C, H, W) input; as in SINGA both may broadcast (ONNX
    PRelu broadcasts the slope only)."""
    _floating("prelu", x)
    check_same_dtype("prelu", x, slope)
    try:
        np.broadcast_shapes(tuple(x.shape), tuple(slope.shape))
    except ValueError:
        raise ValueError(f"prelu: shapes of x {x.shape} and slope {slope.shape} do not broadcast") from None
    return PRelu()(x, slope)[0]
