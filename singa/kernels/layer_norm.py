"""Compiled CPU kernels of layer normalisation over the last axis of (rows, d) arrays.

The array expression in :mod:`singa.autograd.normalization` makes about eight passes over
the activations each way, with temporaries, on one core; these make one pass per row
in each direction (the row stays in cache while its mean, variance and output are
computed), keep only each row's mean and 1/std for the backward instead of the
normalised activations (two floats a row, not d), and run over row pieces on the
workers. The row sums are reassociated (vector lanes); the scale and bias gradients
are summed per piece and the pieces added in order, so one or two workers give the
same bits.

A row is computed in its own dtype, as PyTorch computes it (float32 rows in float32;
only the scale and bias gradients, sums over every row, add up in float64). With a
row's statistics in float64 the kernels took three times as long (a (2048, 128)
float32 layer norm, one core: forward 230 -> 78 us, backward 382 -> 141 us) for
errors of 6e-8 instead of 2.2e-6 relative (PyTorch's: 2.2e-6).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa.kernels.jit import kernel

__all__ = ["layer_norm_rows", "layer_norm_rows_grad", "row_constants"]


def row_constants(d: int, eps: float, dtype: Any) -> Any:
    """``[1 / d, eps, 1]`` in ``dtype``: the constants the kernels compute a row of
    ``d`` values with, so that the row's arithmetic stays in that dtype."""
    return np.array([1.0 / d, eps, 1.0], dtype)


@kernel(reassociate=True)
def layer_norm_rows(x, scale, bias, k, y, mean, invstd):  # pragma: no cover (compiled)
    """y[i] = (x[i] - mean_i) / sqrt(var_i + eps) * scale + bias for each row i of the
    2-D ``x``, with ``k`` = :func:`row_constants`; writes the rows' mean and 1 / std
    (arrays of x's dtype) for the backward."""
    d = x.shape[1]
    for i in range(x.shape[0]):
        total = k[2] - k[2]
        for j in range(d):
            total += x[i, j]
        m = total * k[0]
        sq = k[2] - k[2]
        for j in range(d):
            t = x[i, j] - m
            sq += t * t
        r = k[2] / np.sqrt(sq * k[0] + k[1])
        mean[i] = m
        invstd[i] = r
        for j in range(d):
            y[i, j] = (x[i, j] - m) * r * scale[j] + bias[j]


@kernel(reassociate=True)
def layer_norm_rows_grad(dy, x, scale, mean, invstd, k, dx, dscale, dbias):  # pragma: no cover (compiled)
    """The input gradient of :func:`layer_norm_rows` into ``dx``, and the scale and
    bias gradients of these rows added into ``dscale`` and ``dbias`` (float64, length d):
    dx = (g - mean(g) - xhat mean(g xhat)) / std with g = dy * scale."""
    d = x.shape[1]
    for i in range(x.shape[0]):
        m = mean[i]
        r = invstd[i]
        mg = k[2] - k[2]
        mgx = k[2] - k[2]
        for j in range(d):
            xhat = (x[i, j] - m) * r
            g = dy[i, j] * scale[j]
            mg += g
            mgx += g * xhat
            dscale[j] += dy[i, j] * xhat
            dbias[j] += dy[i, j]
        mg *= k[0]
        mgx *= k[0]
        for j in range(d):
            xhat = (x[i, j] - m) * r
            dx[i, j] = (dy[i, j] * scale[j] - mg - xhat * mgx) * r
