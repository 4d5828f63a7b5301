"""Helpers for the layer tests: gradient checks through a layer's parameters."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from singa import autograd
from singa.autograd.gradcheck import gradcheck
from singa.tensor import Tensor


def t64(a: Any, requires_grad: bool = False) -> Tensor:
    """A float64 tensor of ``a``."""
    return Tensor(data=np.asarray(a, np.float64), dtype=np.float64, requires_grad=requires_grad)


def set_path(layer: Any, name: str, value: Any) -> None:
    """Replace the state at dotted ``name`` (through attributes, lists and dicts)."""
    parts = name.split(".")
    obj = layer
    for p in parts[:-1]:
        if isinstance(obj, list | tuple):
            obj = obj[int(p)]
        else:
            obj = obj[p] if isinstance(obj, dict) else getattr(obj, p)
    last = parts[-1]
    if isinstance(obj, list):
        obj[int(last)] = value
    elif isinstance(obj, dict):
        obj[last] = value
    else:
        setattr(obj, last, value)


def flat_outputs(out: Any) -> Tensor:
    """Every tensor of a (nested) output joined into one vector."""
    ts: list[Tensor] = []

    def walk(o: Any) -> None:
        if isinstance(o, Tensor):
            ts.append(autograd.reshape(o, (-1,)))
        elif isinstance(o, list | tuple):
            for v in o:
                walk(v)

    walk(out)
    return ts[0] if len(ts) == 1 else autograd.cat(ts, 0)


def param_gradcheck(
    layer: Any,
    inputs: Sequence[np.ndarray],
    call: Callable[..., Any] | None = None,
    names: Sequence[str] | None = None,
    wrt_inputs: bool = True,
    **tol: Any,
) -> list[str]:
    """Gradient-check ``call(layer, *inputs)`` with respect to the float inputs (when
    ``wrt_inputs``) and every parameter of the layer (or ``names``). The layer is run once
    first so lazily created parameters exist. Returns the parameter names checked."""
    call = call or (lambda lay, *xs: lay(*xs))
    inputs = [np.asarray(a) for a in inputs]
    call(layer, *[Tensor(data=a, dtype=a.dtype, requires_grad=False) for a in inputs])
    params = layer.get_params()
    names = list(params) if names is None else list(names)
    arrays = list(inputs) + [params[n].to_numpy() for n in names]
    n_in = len(inputs)
    wrt = [i for i, a in enumerate(inputs) if wrt_inputs and a.dtype.kind == "f"]
    wrt += list(range(n_in, n_in + len(names)))

    def fn(*ts: Tensor) -> Tensor:
        for n, p in zip(names, ts[n_in:]):
            set_path(layer, n, p)
        return flat_outputs(call(layer, *ts[:n_in]))

    gradcheck(fn, arrays, wrt=wrt, **tol)
    return names
