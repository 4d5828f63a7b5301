"""Precision policies: float32, mixed (float16 compute on float32 master weights)
and pure float16.

``model.compile(..., precision="mixed")`` (or ``singa-train --precision mixed``)
trains as ``torch.amp`` with a ``GradScaler`` does:

- parameters, buffers and optimizer state stay float32 (the *master* weights);
- at the start of every model call each parameter is cast to float16 once (one
  kernel per parameter per step, whatever the number of uses), the float32 Tensor
  inputs of the call are cast to float16, and the call runs in float16;
- the operators of :data:`FLOAT32_OPERATIONS` compute in float32 whatever the
  policy: their float16 inputs are cast up, and their results cast back to float16
  (losses keep their float32 result);
- the optimizer gets a :class:`~singa.opt.scaler.LossScaler`: the loss is scaled,
  the gradients are unscaled in float32, a step with inf/NaN gradients is skipped
  and the scale shrinks (see :mod:`singa.opt.scaler`).

``precision="float16"`` is pure float16 (SINGA's ``-p float16``): parameters,
buffers and optimizer state are stored in float16 and updated there, inputs are cast
to float16, the :data:`FLOAT32_OPERATIONS` still compute in float32, and there is no
loss scaling. ``precision="float32"`` is the default. Building a model with float16
input placeholders and ``opt.SGD(..., dtype=tensor.float16)`` without a policy is
SINGA's own pure float16 form, and keeps meaning that (every operator in float16).

On the CPU, numpy has no float16 matrix kernels (a float16 ``@`` loops in Python
speed, 10-30x slower than float32), so the operators of :data:`FLOAT32_ACCUMULATE`
(matmul, convolution, Gemm) take their float16 inputs up to float32, multiply with
float32 accumulation and round the result to float16: the arithmetic of a GPU's
tensor cores (float16 operands, float32 accumulation). On a GPU (cupy) they run on
the float16 arrays. bfloat16 is not offered: numpy and cupy have no bfloat16
arithmetic (``ml_dtypes`` stores it, then converts element by element), so it would
be slower than float16 everywhere and no more accurate where it matters here.

While a policy is active, ``singa.autograd.autocast`` is set to an :class:`Autocast`
that every operator call goes through (see :meth:`Autocast.call`). Use it outside a
Model with :func:`autocast`.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

import singa.autograd as _ag
from singa.autograd import (
    activation,
    attention,
    conv,
    conv_transpose,
    linalg,
    loss,
    normalization,
    pooling,
    reduction,
)
from singa.autograd.elementwise import Cast
from singa.layer import norm as _norm_layers
from singa.opt.scaler import LossScaler
from singa.tensor import Tensor

__all__ = [
    "PRECISIONS",
    "FLOAT32_OPERATIONS",
    "FLOAT32_ACCUMULATE",
    "LOSS_OPERATIONS",
    "FLOAT32_LAYERS",
    "Policy",
    "Autocast",
    "autocast",
    "get_policy",
    "set_precision",
    "attach_scaler",
]

# ----- the one place that says what computes in float32 ------------------------------------
#: operators that compute in float32 whatever the policy, with the indices of the inputs
#: cast up to float32 (None: every floating input). BatchNorm's running statistics
#: (inputs 3 and 4) are updated in place, so they are passed as they are.
FLOAT32_OPERATIONS: dict[type, tuple[int, ...] | None] = {
    loss.SoftMaxCrossEntropy: None,
    loss.CrossEntropy: None,
    loss.NLLLoss: None,
    loss.MSELoss: None,
    loss.BinaryCrossEntropy: None,
    activation.SoftMax: None,
    activation.LogSoftMax: None,
    normalization.BatchNorm2d: (0, 1, 2),
    normalization.LayerNorm: None,
    normalization.RMSNorm: None,
    attention.ScaledDotProductAttention: None,
    attention.MaskedSoftMax: None,
    reduction.ReduceSum: None,
    reduction.ReduceMean: None,
    pooling.GlobalAvgPool: None,
}

#: float32 operators whose float32 result is kept (the loss); the others return their
#: result in the dtype their inputs had
LOSS_OPERATIONS: frozenset = frozenset(
    {loss.SoftMaxCrossEntropy, loss.CrossEntropy, loss.NLLLoss, loss.MSELoss, loss.BinaryCrossEntropy}
)

#: products computed with float32 accumulation from float16 operands on the CPU (numpy
#: has no float16 matrix kernels); on a GPU they run on the float16 arrays
FLOAT32_ACCUMULATE: frozenset = frozenset(
    {
        linalg.MatMul,
        linalg.Gemm,
        conv.Conv2d,
        conv_transpose.ConvTranspose2d,
        conv_transpose.ConvTranspose3d,
    }
)

#: layers whose parameters are not cast to the compute dtype (they feed float32
#: operators only); their buffers (running statistics) stay float32 under "mixed"
FLOAT32_LAYERS: tuple[type, ...] = (_norm_layers.BatchNorm2d, _norm_layers.LayerNorm, _norm_layers.RMSNorm)

PRECISIONS = ("float32", "mixed", "float16")


@dataclass(frozen=True)
class Policy:
    """A precision policy.

    Attributes:
        name: "float32", "mixed" or "float16".
        compute_dtype: the dtype the model computes in.
        param_dtype: the dtype parameters, buffers and optimizer state are kept in.
        loss_scaling: whether the optimizer scales the loss (dynamic loss scaling).
    """

    name: str
    compute_dtype: np.dtype
    param_dtype: np.dtype
    loss_scaling: bool

    @property
    def casts(self) -> bool:
        """Whether model calls run under :class:`Autocast` (every policy but float32)."""
        return self.compute_dtype != np.dtype(np.float32)


_POLICIES = {
    "float32": Policy("float32", np.dtype(np.float32), np.dtype(np.float32), False),
    "mixed": Policy("mixed", np.dtype(np.float16), np.dtype(np.float32), True),
    "float16": Policy("float16", np.dtype(np.float16), np.dtype(np.float16), False),
}


def get_policy(precision: str | Policy) -> Policy:
    """The :class:`Policy` called ``precision`` (one of :data:`PRECISIONS`)."""
    if isinstance(precision, Policy):
        return precision
    policy = _POLICIES.get(precision) if isinstance(precision, str) else None
    if policy is None:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return policy


def _low(dtype: Any) -> bool:
    """A floating dtype narrower than float32 (float16)."""
    d = np.dtype(dtype)
    return d.kind == "f" and d.itemsize < 4


def _astype(a: Any, dtype: Any) -> Any:
    return a.astype(dtype)


# ----- the runtime: casts around operators ------------------------------------------------
class Autocast:
    """The operator hook of a policy (``singa.autograd.autocast`` while active).

    Args:
        policy: the :class:`Policy`.
        params: parameter Tensors to cast to the compute dtype for the duration
            (master weights; empty for "float16", whose parameters are float16).
    """

    def __init__(self, policy: Policy, params: list[Tensor] = ()):
        self.policy = policy
        self.masters: dict[Tensor, Any] = {}
        self._float32_params: dict[Tensor, Tensor] = {}
        self._cast_params(list(params))

    def _cast_params(self, params: list[Tensor]) -> None:
        """Replace each parameter's array by its compute-dtype copy (one recorded
        kernel each), keeping the master array to restore."""
        to = self.policy.compute_dtype
        for p in params:
            if p.dtype == to or p in self.masters:
                continue
            master = p.data
            kernel = functools.partial(_astype, dtype=to)
            half = kernel(master)
            rec = p.device.recorder
            if rec is not None:
                rec.record(kernel, [master], (half,))
            self.masters[p] = master
            p.data = half

    def restore_masters(self) -> None:
        """Put the master arrays back into the parameters (before the update; the
        operators already hold what backward needs)."""
        for p, master in self.masters.items():
            p.data = master
        self.masters.clear()
        self._float32_params.clear()

    def cast_input(self, x: Any) -> Any:
        """A float32 Tensor argument as a compute-dtype Tensor (differentiable)."""
        to = self.policy.compute_dtype
        if isinstance(x, Tensor) and x.dtype.kind == "f" and x.dtype != to and x.dtype.itemsize == 4:
            return Cast(to).apply_to((x,))[0]
        return x

    def call(self, op: Any, xs: tuple) -> tuple:
        """Run operator ``op`` on ``xs``: float32 operators on float32 inputs, the
        products of :data:`FLOAT32_ACCUMULATE` with float32 accumulation on the CPU,
        everything else as given."""
        kind = type(op)
        if kind in FLOAT32_OPERATIONS:
            return self._in_float32(op, xs, FLOAT32_OPERATIONS[kind], kind in LOSS_OPERATIONS)
        if kind in FLOAT32_ACCUMULATE and not xs[0].device.is_gpu:
            return self._in_float32(op, xs, None, False)
        return op.apply_to(xs)

    def _up(self, x: Tensor) -> Tensor:
        """``x`` cast to float32; the float32 copy of a cast master weight is made
        once and shared by all its uses (until :meth:`restore_masters`)."""
        if x not in self.masters:
            return Cast(np.float32).apply_to((x,))[0]
        up = self._float32_params.get(x)
        if up is None:
            up = self._float32_params[x] = Cast(np.float32).apply_to((x,))[0]
        return up

    def _in_float32(self, op: Any, xs: tuple, which: tuple | None, keep: bool) -> tuple:
        low = None
        ins = list(xs)
        for i, x in enumerate(xs):
            if (which is None or i in which) and _low(x.dtype):
                low = x.dtype
                ins[i] = self._up(x)
        if low is None:
            return op.apply_to(xs)
        ys = op.apply_to(tuple(ins))
        if keep:
            return ys
        return tuple(Cast(low).apply_to((y,))[0] if y.dtype == np.float32 else y for y in ys)


@contextlib.contextmanager
def autocast(precision: str | Policy = "mixed", params: list[Tensor] = ()) -> Iterator[Autocast]:
    """Run the enclosed operators under a policy (``torch.autocast``'s role).

    ``params`` (e.g. ``model.get_params().values()``) are cast to the compute dtype
    on entry and restored on exit (or by :meth:`Autocast.restore_masters`, which the
    loss scaler calls before it updates them). Nested uses keep the outer policy."""
    policy = get_policy(precision)
    if _ag.autocast is not None or not policy.casts:
        yield _ag.autocast
        return
    scope = Autocast(policy, list(params) if policy.param_dtype != policy.compute_dtype else [])
    _ag.autocast = scope
    try:
        yield scope
    finally:
        _ag.autocast = None
        scope.restore_masters()


def compute_params(model: Any) -> list[Tensor]:
    """The parameters a mixed model casts each step: all but those of
    :data:`FLOAT32_LAYERS`."""
    keep = {
        id(t)
        for layer in model.sublayers().values()
        if isinstance(layer, FLOAT32_LAYERS)
        for t in layer.get_params().values()
    }
    if isinstance(model, FLOAT32_LAYERS):
        keep |= {id(t) for t in model.get_params().values()}
    return [t for t in model.get_params().values() if id(t) not in keep]


def call(model: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn(*args, **kwargs)`` (the model's forward or train_one_batch) under the
    model's policy: parameters and float32 inputs cast, operators hooked. Model calls
    go through it (``functools.partial(call, model, fn)``), so graph mode traces the
    casts."""
    policy = get_policy(model.precision)
    if not policy.casts or _ag.autocast is not None:
        return fn(*args, **kwargs)
    params = compute_params(model) if policy.param_dtype != policy.compute_dtype else []
    with autocast(policy, params) as scope:
        args = tuple(scope.cast_input(a) for a in args)
        kwargs = {k: scope.cast_input(v) for k, v in kwargs.items()}
        return fn(*args, **kwargs)


# ----- switching a model's precision ------------------------------------------------------
def _convert_states(model: Any, policy: Policy) -> None:
    """Store the model's floating states in the policy's parameter dtype (float32 for
    float32 and mixed, float16 for float16); BatchNorm statistics included."""
    to = policy.param_dtype
    for t in model.get_states().values():
        if t.dtype.kind == "f" and t.dtype != to and t.dtype != np.float64:
            t.data = t.data.astype(to)


def attach_scaler(model: Any, optimizer: Any) -> None:
    """Give ``optimizer`` a loss scaler when the model's policy scales the loss (and
    take it away when it does not). Raises ValueError for an optimizer whose
    ``dtype`` differs from the parameter dtype of the "mixed" or "float16" policy
    ("float32" is also SINGA's form, where the inputs' dtype decides)."""
    if optimizer is None:
        return
    policy = get_policy(model.precision)
    want = np.dtype(getattr(optimizer, "dtype", None) or policy.param_dtype)
    if policy.casts and want != policy.param_dtype:
        raise ValueError(
            f"precision={policy.name!r} keeps {policy.param_dtype} parameters but the optimizer "
            f"was built with dtype={want} (SINGA's pure float16 form: use precision='float16', "
            "or drop dtype)"
        )
    current = getattr(optimizer, "loss_scaler", None)
    if policy.loss_scaling and current is None:
        optimizer.loss_scaler = LossScaler()
    elif not policy.loss_scaling:
        optimizer.loss_scaler = None


def set_precision(model: Any, precision: str | Policy) -> None:
    """Switch ``model`` to ``precision``: convert its states to the policy's parameter
    dtype, attach or remove its optimizer's loss scaler and drop cached graphs. Do it
    before training (optimizer slots made under another precision are not
    converted)."""
    policy = get_policy(precision)
    prev = model.precision
    model.precision = policy.name
    try:
        attach_scaler(model, model.optimizer)
    except ValueError:
        model.precision = prev
        raise
    _convert_states(model, policy)
    model.reset_graph()


# ----- ONNX -------------------------------------------------------------------------------------
@contextlib.contextmanager
def states_as(model: Any, dtype: Any) -> Iterator[None]:
    """Within the block the model's floating states (parameters and buffers) hold
    ``dtype`` copies (float32 or float16); the original arrays are put back on exit.
    ``sonnx.export_model(..., dtype=...)`` exports under it."""
    to = np.dtype(dtype)
    if to not in (np.dtype(np.float32), np.dtype(np.float16)):
        raise ValueError(f"export_model: dtype must be float32 or float16, got {to}")
    states = [t for t in model.get_states().values() if t.dtype.kind == "f"]
    saved = [t.data for t in states]
    try:
        for t in states:
            if t.dtype != to:
                t.data = t.data.astype(to)
        yield
    finally:
        for t, a in zip(states, saved):
            t.data = a


def inputs_as(inputs: Any, dtype: Any) -> list:
    """The floating Tensors of ``inputs`` (a Tensor or a list) as new ``dtype`` Tensors."""
    to = np.dtype(dtype)
    xs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    return [
        Tensor(x.shape, x.device, to, data=x.data, requires_grad=False)
        if isinstance(x, Tensor) and x.dtype.kind == "f" and x.dtype != to
        else x
        for x in xs
    ]
