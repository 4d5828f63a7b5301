"""Compiled CPU kernels of the optimizers' updates: one pass over a parameter, its
gradient and its slots, where the numpy formulas of :mod:`singa.opt.optimizers` make a
pass (and often a temporary) per operation: four for SGD with momentum, eleven for
Adam. Every operation is rounded as numpy rounds it (scalars in the arrays' dtype, no
fused multiply-add), so the kernels equal the numpy formulas bit for bit, and a model
gives the same numbers whichever path a parameter takes.
"""

from __future__ import annotations

import numpy as np

from singa.kernels.jit import kernel, takes_floats

__all__ = ["fused_step_applies", "sgd_momentum_step", "adam_step", "FUSED_MIN_SIZE"]

#: below this many elements numpy's few calls cost less than one call of a kernel
FUSED_MIN_SIZE = 1 << 12


def fused_step_applies(*arrays) -> bool:
    """Whether the compiled steps take these arrays: numpy, at least
    :data:`FUSED_MIN_SIZE` elements, one float32 or float64 dtype and shape, and
    contiguous (so they flatten without copies)."""
    return (
        takes_floats(*arrays)
        and arrays[0].size >= FUSED_MIN_SIZE
        and all(a.shape == arrays[0].shape and a.flags.c_contiguous for a in arrays)
    )


@kernel
def sgd_momentum_step(p, g, buf, lr, m, keep, damp, wd, nesterov):  # pragma: no cover (compiled)
    """SGD with momentum after its first step: buf = m buf + (1 - dampening) g, then
    p -= lr (g + m buf if nesterov else buf), g with L2 decay ``wd`` (1-D arrays)."""
    for i in range(p.shape[0]):
        gi = g[i]
        if wd != 0:
            gi = gi + wd * p[i]
        b = buf[i] * m
        b = b + (keep * gi if damp else gi)
        buf[i] = b
        u = gi + m * b if nesterov else b
        p[i] = p[i] - lr * u


@kernel
def adam_step(p, g, m, v, vmax, hyper, decoupled, amsgrad):  # pragma: no cover (compiled)
    """Adam's update of the 1-D ``p`` (``vmax`` is used when ``amsgrad``), with
    ``hyper`` = (weight decay, decay factor 1 - lr wd, beta1, 1 - beta1, beta2, 1 - beta2,
    sqrt(1 - beta2^t), eps, step size) in the arrays' dtype, in numpy's order of
    roundings: L2 decay (or the decoupled decay of p first), m = beta1 m + (1 - beta1) g,
    v = beta2 v + (1 - beta2) g g, p -= step * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)."""
    wd, decay, b1, one_b1, b2, one_b2, bias2, eps, step = (
        hyper[0], hyper[1], hyper[2], hyper[3], hyper[4], hyper[5], hyper[6], hyper[7], hyper[8],
    )  # fmt: skip
    for i in range(p.shape[0]):
        pi = p[i]
        gi = g[i]
        if decoupled:
            pi = pi * decay
        elif wd != 0:
            gi = gi + wd * pi
        mi = m[i] * b1 + gi * one_b1
        vi = v[i] * b2 + (gi * gi) * one_b2
        m[i] = mi
        v[i] = vi
        if amsgrad:
            vi = max(vmax[i], vi)
            vmax[i] = vi
        denom = np.sqrt(vi) / bias2 + eps
        p[i] = pi - (mi / denom) * step
