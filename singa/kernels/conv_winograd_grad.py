"""The backward of a 3x3 stride-1 convolution as Winograd F(4x4, 3x3).

The forward (:mod:`singa.kernels.conv_winograd`) computes each 4x4 output block as
``Y = A^T [(G g G^T) * (B^T d B)] A``. Its backward is the adjoint of each step: the
output gradient's blocks are transformed, ``dM = A dY A^T`` (6x6 per tile and output
channel); for each of the 36 positions one product gives the filters' gradient,
``dU[p] = V[p]^T @ dM[p]`` (C, O), with V the input's transformed tiles made again as the
forward makes them, and one gives the tiles' gradient, ``dV[p] = dM[p] @ U[p]^T``
(tiles, C); then ``dW = G^T dU G`` and ``dd = B dV B^T``, whose 6x6 tiles, overlapping by
two pixels, are added into the input's gradient. The transforms are
:mod:`conv_winograd_tiles`'s (long passes over a sample).

What it saves: the column backward makes columns nine times the size of dy and runs two
products of (N*H*W) x (9*C) x O multiply-adds over them; these products take 36 / (16 * 9)
= 1/4 of that, at the cost of three transforms (each a pass or two over the
activations). ResNet-20's stride-1 convolutions (batch 64, two workers) had their backward
at 0.4-0.7x of the columns' time (``bench/README.md``). The roundings are Winograd's:
within a few 1e-6 of a float64 gradient relative to its largest value (the columns: a
few 1e-7). A batch slice at a time on the workers; the slices and the order in which
their filter gradients are added depend on the shapes only, so the bits do not depend on
the worker count.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np

from singa.kernels import conv_slices as sl
from singa.kernels import conv_winograd as wg
from singa.kernels import conv_winograd_tiles as wg_tiles
from singa.kernels.buffers import scratch

__all__ = ["applies", "backward"]

TILE = wg.TILE
_A = 6  # tile side of F(4x4, 3x3)
# a batch slice's tiles in every transformed form (36 * tiles * (2C + 2O) floats) stay
# within about this many bytes
_SLICE_BYTES = 2 << 20


@functools.cache
def _filter_grad_map() -> np.ndarray:
    """(9, 36) float32: dW's taps (i, j) from dU's positions (p, q), ``G^T dU G``."""
    _, g, _ = wg.matrices(3)
    return np.kron(g, g).T.astype(np.float32)


def applies(dy: Any, x_shape: tuple, w_shape: tuple, geometry: dict) -> bool:
    """Whether the backward of a convolution of ``geometry`` (``kernel_size``, ``stride``,
    ``pads``, ``dilation``, ``groups``) runs here: a float32 numpy ``dy``, 3x3 filters of
    stride 1 without dilation or groups, padding at most 2 a side, at least
    :data:`~singa.kernels.conv_winograd.TRAINING_MIN_CHANNELS` channels each way, at
    least twice as many output tiles as the filters' larger side (measured, ResNet-18
    batch 32: 256 channels on 8x8 took 1.5x the columns' time; 64-128 channels on 16x16
    and 32x32 0.7-0.76x), and ``SINGA_WINOGRAD_TRAINING`` not ``0``."""
    if type(dy) is not np.ndarray or dy.dtype != np.float32 or dy.ndim != 4:
        return False
    if os.environ.get("SINGA_WINOGRAD_TRAINING") == "0" or geometry["groups"] != 1:
        return False
    if tuple(geometry["kernel_size"]) != (3, 3) or tuple(w_shape[2:]) != (3, 3):
        return False
    if (
        tuple(geometry["stride"]) != (1, 1)
        or tuple(geometry["dilation"]) != (1, 1)
        or max(geometry["pads"]) > 2
    ):
        return False
    n, o, oh, ow = dy.shape
    c = x_shape[1]
    tiles = n * -(-oh // TILE) * -(-ow // TILE)
    return min(c, o) >= wg.TRAINING_MIN_CHANNELS and tiles >= 2 * max(c, o) and min(oh, ow) >= TILE


def backward(dy: Any, x: Any, W: Any, pads: tuple) -> tuple[Any, Any]:
    """(dx, dW) of the 3x3 stride-1 convolution of ``x`` (N, C, H, W) with ``W`` (O, C,
    3, 3) padded by ``pads`` (top, left, bottom, right), given its output gradient ``dy``
    (N, O, OH, OW), all float32 numpy arrays of any layout. ``x`` None: no dW; ``W``
    None: no dx. dx is NCHW with NHWC memory, dW contiguous."""
    n, o, oh, ow = dy.shape
    c = (x if x is not None else W).shape[1]
    h, w = x.shape[2:] if x is not None else (oh - pads[0] - pads[2] + 2, ow - pads[1] - pads[3] + 2)
    th, tw = -(-oh // TILE), -(-ow // TILE)
    top, left = pads[:2]
    dyh = dy.transpose(0, 2, 3, 1)
    xh = None if x is None else x.transpose(0, 2, 3, 1)
    # U^T made in its own layout: numpy's batched product with the transposed view of U
    # took 1.9x as long on ResNet-20's 16 and 32 channels (one core, 103 -> 55 us a slice)
    Ut = None if W is None else wg.training_filters(W, transposed=True)
    dxh = None if W is None else scratch(np, (n, h, w, c), dy.dtype)

    def one_slice(i0: int, i1: int, du: Any) -> Any:
        s = i1 - i0
        tiles = s * th * tw
        dm = wg_tiles.grad_tiles(dyh[i0:i1], th, tw)
        if xh is not None:
            v = wg.input_tiles(xh[i0:i1], 3, top, left, th, tw)
            part = np.matmul(v.transpose(0, 2, 1), dm)  # (36, C, O)
            du = sl.accumulate(du, part)
        if dxh is not None:
            dv = scratch(np, (_A * _A, tiles, c), dy.dtype)
            np.matmul(dm, Ut, out=dv)
            wg_tiles.input_grad(dv, th, tw, top, left, dxh[i0:i1])
        return du

    def piece(run: list) -> Any:
        du = None
        for i0, i1 in run:  # the run's slices share one partial of dU, added in order
            du = one_slice(i0, i1, du)
        return du

    per_sample = _A * _A * th * tw * 2 * (c + o) * dy.itemsize
    slices = wg.batch_slices(n, th * tw, per_sample, _SLICE_BYTES)
    partial = 0 if xh is None else _A * _A * c * o * dy.itemsize
    parts = sl.run_slices(np, piece, slices, n * th * tw * _A * _A * c * o, partial)
    dW = None
    if xh is not None:
        du = sl.sum_in_order(parts)  # in run order: the same bits on any number of workers
        taps = _filter_grad_map() @ du.reshape(_A * _A, c * o)  # (9, C*O)
        dW = np.ascontiguousarray(taps.reshape(3, 3, c, o).transpose(3, 2, 0, 1))
    return (None if dxh is None else dxh.transpose(0, 3, 1, 2)), dW
