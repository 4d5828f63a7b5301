"""Compiled CPU kernels of layer normalisation over the last axis of (rows, d) arrays.

The array expression in :mod:`singa.autograd.normalization` makes about eight passes over
the activations each way, with temporaries, on one core; these make one pass per row
in each direction (the row stays in cache while its mean, variance and output are
computed), keep only each row's mean and 1/std for the backward instead of the
normalised activations (two floats a row, not d), and run over row pieces on the
workers. The row sums are reassociated (vector lanes); the scale and bias gradients
are summed per piece and the pieces added in order, so one or two workers give the
same bits.
"""

from __future__ import annotations

import math

from singa.kernels.jit import kernel

__all__ = ["layer_norm_rows", "layer_norm_rows_grad"]


@kernel(reassociate=True)
def layer_norm_rows(x, scale, bias, eps, y, mean, invstd):  # pragma: no cover (compiled)
    """y[i] = (x[i] - mean_i) / sqrt(var_i + eps) * scale + bias for each row i of the
    2-D ``x``; writes the rows' mean and 1 / std (float64 arrays) for the backward."""
    d = x.shape[1]
    for i in range(x.shape[0]):
        total = 0.0
        for j in range(d):
            total += x[i, j]
        m = total / d
        sq = 0.0
        for j in range(d):
            t = x[i, j] - m
            sq += t * t
        r = 1.0 / math.sqrt(sq / d + eps)
        mean[i] = m
        invstd[i] = r
        for j in range(d):
            y[i, j] = (x[i, j] - m) * r * scale[j] + bias[j]


@kernel(reassociate=True)
def layer_norm_rows_grad(dy, x, scale, mean, invstd, dx, dscale, dbias):  # pragma: no cover (compiled)
    """The input gradient of :func:`layer_norm_rows` into ``dx``, and the scale and
    bias gradients of these rows added into ``dscale`` and ``dbias`` (float64, length d):
    dx = (g - mean(g) - xhat mean(g xhat)) / std with g = dy * scale."""
    d = x.shape[1]
    for i in range(x.shape[0]):
        m = mean[i]
        r = invstd[i]
        mg = 0.0
        mgx = 0.0
        for j in range(d):
            xhat = (x[i, j] - m) * r
            g = dy[i, j] * scale[j]
            mg += g
            mgx += g * xhat
            dscale[j] += dy[i, j] * xhat
            dbias[j] += dy[i, j]
        mg /= d
        mgx /= d
        for j in range(d):
            xhat = (x[i, j] - m) * r
            dx[i, j] = (dy[i, j] * scale[j] - mg - xhat * mgx) * r
