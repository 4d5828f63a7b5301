"""Gradient checking against central finite differences (use float64 inputs).

Example::

    from singa.autograd.gradcheck import gradcheck
    gradcheck(lambda a, b: autograd.mul(a, b), [np.random.randn(3, 4), np.random.randn(4)])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import singa.autograd as autograd
from singa.tensor import Tensor


def numeric_grad(f: Callable[[], float], x: np.ndarray, eps: float) -> np.ndarray:
    """Central differences of the scalar function ``f`` with respect to array ``x``
    (perturbed in place and restored)."""
    g = np.zeros_like(x, dtype=np.float64)
    flat = x.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + eps
        fp = f()
        flat[i] = old - eps
        fm = f()
        flat[i] = old
        g.reshape(-1)[i] = (fp - fm) / (2 * eps)
    return g


def gradcheck(
    fn: Callable[..., Tensor],
    inputs: Sequence[Any],
    wrt: Sequence[int] | None = None,
    eps: float = 1e-6,
    atol: float = 1e-6,
    rtol: float = 1e-5,
    seed: int = 0,
) -> float:
    """Check ``autograd.backward`` through ``fn(*tensors)`` against finite differences.

    Args:
        fn: builds the output Tensor from input Tensors.
        inputs: numpy arrays (float64 for the differentiated ones).
        wrt: indices of the inputs to differentiate (default: every float input).
        eps, atol, rtol: finite-difference step and tolerances.

    The output is reduced with a fixed random projection, so every output element
    matters. The graph is walked twice (backward keeps it, as SINGA's does) and both
    walks must give the same gradients bit for bit: an operator's backward must not
    consume what its forward cached. Raises AssertionError naming the input and the
    worst element; returns the largest absolute error.
    """
    arrays = [np.array(a, order="C") for a in inputs]  # C order: numeric_grad perturbs a flat view
    if wrt is None:
        wrt = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    tensors = [
        Tensor(a.shape, dtype=a.dtype, data=a, requires_grad=i in wrt, stores_grad=i in wrt)
        for i, a in enumerate(arrays)
    ]
    prev = autograd.training
    autograd.training = True
    try:
        y = fn(*tensors)
        rng = np.random.default_rng(seed)
        proj = rng.standard_normal(y.shape)
        analytic = {t: g.to_numpy().copy() for t, g in autograd.backward(y, proj.astype(y.dtype))}
        _check_second_walk(analytic, autograd.backward(y, proj.astype(y.dtype)))

        def f() -> float:
            with autograd.no_grad():
                out = fn(*[Tensor(a.shape, dtype=a.dtype, data=a, requires_grad=False) for a in arrays])
            return float((out.to_numpy().astype(np.float64) * proj).sum())

        worst = 0.0
        for i in wrt:
            num = numeric_grad(f, arrays[i], eps)
            got = analytic.get(tensors[i])
            got = np.zeros_like(num) if got is None else got
            if got.shape != num.shape:
                raise AssertionError(f"input {i}: gradient shape {got.shape} != input shape {num.shape}")
            err = np.abs(got - num)
            tol = atol + rtol * np.abs(num)
            if (err > tol).any():
                j = np.unravel_index(np.argmax(err - tol), err.shape)
                raise AssertionError(
                    f"input {i}: analytic {got[j]:.8g} vs numeric {num[j]:.8g} at {j} "
                    f"(max abs error {err.max():.3g})"
                )
            worst = max(worst, float(err.max()) if err.size else 0.0)
        return worst
    finally:
        autograd.training = prev


def _check_second_walk(first: dict, second: Any) -> None:
    """A second backward walk over a kept graph must repeat the first walk's gradients."""
    again = {t: g.to_numpy() for t, g in second}
    if again.keys() != first.keys():
        raise AssertionError("a second backward walk yields gradients for other tensors than the first")
    for t, g in first.items():
        if not np.array_equal(g, again[t], equal_nan=True):
            raise AssertionError(
                f"a second backward walk gives another gradient for the tensor of shape {g.shape}: "
                "some backward changed what its forward cached"
            )
