"""What a convolution does to each batch slice of its output as it makes it.

The forward of :class:`~singa.autograd.conv.Conv2d` writes its output (N*OH*OW, O),
pixel-major rows, a few samples at a time. Right after a slice's product, while the
slice is in cache, an :class:`Epilogue` adds the bias and, for the eval-only fusions of
:mod:`singa.model.inference`, applies BatchNorm's evaluation, adds a residual (a ResNet
block's shortcut), applies ReLU, and max-pools the slice into the pooled output. Each
step gives the bits of the operator it replaces (``BatchNorm2d`` on the CPU, ``Add``,
``ReLU``, ``MaxPool2d`` without padding), so fused evaluation stays bitwise equal to
eager evaluation; a training forward uses the bias alone.
"""

from __future__ import annotations

from typing import Any

import singa.kernels.im2col as im
from singa.kernels.buffers import scratch

__all__ = ["Epilogue", "pool_window"]


def pool_window(pool: Any) -> tuple[int, int, int, int] | None:
    """``(kh, kw, sh, sw)`` of a 2-D max-pool operator that an epilogue can apply to a
    convolution's slices (no padding, no ceil mode: every window lies inside one
    sample's output), else None."""
    if getattr(pool, "spatial_dims", 2) != 2 or pool.ceil_mode or any(pool.pads):
        return None
    return (*pool.kernel_size, *pool.stride)


class Epilogue:
    """The steps applied to the rows of samples ``i0:i1`` of a convolution's output.

    Args:
        xp: the array module.
        shape: the output's (N, OH, OW, O).
        dtype: the output's dtype.
        bias: (O,) added to every row, or None.
        relu: apply ReLU (after the bias, the affine map and the residual).
        residual: an (N, O, OH, OW) array added after the bias and the affine map, or
            None.
        pool: ``(kh, kw, sh, sw)`` of a max-pool (:func:`pool_window`) applied last,
            into an output of its own, or None.
        affine: (m, a, b), each (O,): ``(y - m) * a + b`` after the bias (BatchNorm's
            evaluation), or None.
    """

    def __init__(
        self,
        xp: Any,
        shape: tuple,
        dtype: Any,
        bias: Any = None,
        relu: bool = False,
        residual: Any = None,
        pool: tuple | None = None,
        affine: tuple | None = None,
    ):
        n, oh, ow, o = shape
        self.xp, self.shape, self.bias, self.relu, self.pool = xp, shape, bias, relu, pool
        self.affine = affine
        # rows like the output's (a copy when the residual is laid out otherwise)
        self.res = None
        if residual is not None:
            self.res = xp.ascontiguousarray(residual.transpose(0, 2, 3, 1)).reshape(n * oh * ow, o)
        self.pooled = None
        if pool is not None:
            kh, kw, sh, sw = pool
            self.pooled = scratch(xp, (n, (oh - kh) // sh + 1, (ow - kw) // sw + 1, o), dtype)

    def __call__(self, out: Any, i0: int, i1: int) -> None:
        """Apply the steps to ``out``, the rows (in place) of samples ``i0:i1``."""
        rows = self.shape[1] * self.shape[2]
        res = None if self.res is None else self.res[i0 * rows : i1 * rows]
        # ReLU and max-pool commute, bits included (NaN stays NaN either way; whatever
        # is <= 0 becomes +0 either way), so ReLU goes on the pooled slice: a pass over
        # a quarter of the values for a 2x2 pool instead of one over the product's
        relu_after_pool = self.relu and self.pool is not None
        im.finish_rows(self.xp, out, self.bias, self.affine, res, self.relu and not relu_after_pool)
        if self.pool is not None:
            kh, kw, sh, sw = self.pool
            src = out.reshape(i1 - i0, *self.shape[1:])
            pooled = self.pooled[i0:i1]
            im.max_of_windows(self.xp, src, kh, kw, sh, sw, pooled)
            if relu_after_pool:
                im.finish_rows(self.xp, pooled.reshape(-1, self.shape[3]), relu=True)

    def output(self, y2: Any) -> Any:
        """The result, NCHW with NHWC memory: the pooled output, or ``y2`` (the rows)."""
        y = self.pooled if self.pooled is not None else y2.reshape(self.shape)
        return y.transpose(0, 3, 1, 2)
