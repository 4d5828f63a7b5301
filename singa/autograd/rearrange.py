"""Moving data between the channel axis and blocks of pixels (ONNX DepthToSpace and
SpaceToDepth) for (N, C, H, W) tensors.

``mode`` orders the channels of a block: "DCR" (depth-column-row, ONNX's default;
channel ``(i * b + j) * C' + c`` goes to output channel c, block pixel (i, j)) or
"CRD" (column-row-depth: channel ``(c * b + i) * b + j``). ``space_to_depth`` with a
mode is the exact inverse of ``depth_to_space`` with the same mode (ONNX
SpaceToDepth has DCR order). Both are permutations, so each one's gradient is the
other applied to ``dy``.

Example::

    y = autograd.depth_to_space(x, 2)      # (N, 8, H, W) -> (N, 2, 2H, 2W)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from singa.autograd.engine import Operation
from singa.device import array_module
from singa.tensor import Tensor

__all__ = ["depth_to_space", "space_to_depth", "DepthToSpace", "SpaceToDepth", "col2im"]

_MODES = ("DCR", "CRD")


class _BlockPermute(Operation):
    """y = x reshaped to ``split``, its axes permuted by ``perm``, reshaped to the output."""

    def __init__(self, blocksize: int, mode: str = "DCR"):
        super().__init__()
        self.blocksize = int(blocksize)
        self.mode = mode

    def plan(self, shape: tuple) -> tuple:
        """(split shape, axis permutation, output shape) for an input ``shape``."""
        raise NotImplementedError

    def forward(self, x):
        split, perm, out = self.plan(x.shape)
        if self.requires_grad:
            self.cache = (x.shape, tuple(split[p] for p in perm), perm)
        return x.reshape(split).transpose(perm).reshape(out)

    def backward(self, dy):
        shape, moved, perm = self.cache
        inverse = [perm.index(i) for i in range(len(perm))]
        return dy.reshape(moved).transpose(inverse).reshape(shape)


class DepthToSpace(_BlockPermute):
    """(N, C, H, W) -> (N, C / b^2, H b, W b)."""

    def plan(self, shape):
        n, c, h, w = shape
        b = self.blocksize
        k = c // (b * b)
        if self.mode == "DCR":
            return (n, b, b, k, h, w), (0, 3, 4, 1, 5, 2), (n, k, h * b, w * b)
        return (n, k, b, b, h, w), (0, 1, 4, 2, 5, 3), (n, k, h * b, w * b)


class SpaceToDepth(_BlockPermute):
    """(N, C, H, W) -> (N, C b^2, H / b, W / b)."""

    def plan(self, shape):
        n, c, h, w = shape
        b = self.blocksize
        split = (n, c, h // b, b, w // b, b)
        perm = (0, 3, 5, 1, 2, 4) if self.mode == "DCR" else (0, 1, 3, 5, 2, 4)
        return split, perm, (n, c * b * b, h // b, w // b)


def _check(name: str, x: Tensor, blocksize: int, mode: str) -> None:
    if mode not in _MODES:
        raise ValueError(f"{name}: mode must be 'DCR' or 'CRD', got {mode!r}")
    if x.ndim() != 4 or int(blocksize) < 1:
        raise ValueError(
            f"{name}: needs an (N, C, H, W) tensor and blocksize >= 1, got {x.shape}, {blocksize}"
        )


def depth_to_space(x: Tensor, blocksize: int, mode: str = "DCR") -> Tensor:
    """Rearrange channels into blocksize x blocksize pixel blocks: (N, C, H, W) ->
    (N, C / blocksize^2, H * blocksize, W * blocksize); C must be divisible by
    blocksize^2. ``mode`` "DCR" (default) or "CRD" orders the channels of a block."""
    _check("depth_to_space", x, blocksize, mode)
    b2 = int(blocksize) ** 2
    if x.shape[1] % b2:
        raise ValueError(f"depth_to_space: channels {x.shape[1]} are not divisible by blocksize^2 = {b2}")
    return DepthToSpace(blocksize, mode)(x)[0]


def space_to_depth(x: Tensor, blocksize: int, mode: str = "DCR") -> Tensor:
    """Rearrange blocksize x blocksize pixel blocks into channels: (N, C, H, W) ->
    (N, C * blocksize^2, H / blocksize, W / blocksize), the inverse of
    :func:`depth_to_space` with the same ``mode``; H and W must be divisible by
    blocksize."""
    _check("space_to_depth", x, blocksize, mode)
    b = int(blocksize)
    if x.shape[2] % b or x.shape[3] % b:
        raise ValueError(f"space_to_depth: H and W of {x.shape} are not divisible by blocksize {b}")
    return SpaceToDepth(blocksize, mode)(x)[0]


# ----- col2im ------------------------------------------------------------------------------------
def _col2im_slices(image: tuple, block: tuple, strides: tuple, pads: tuple, dil: tuple) -> tuple[list, tuple]:
    """For every kernel offset (row-major), the slice of the padded image its column
    entries land on; and the grid of block positions."""
    import itertools

    nd = len(image)
    padded = [image[i] + pads[i] + pads[i + nd] for i in range(nd)]
    grid = tuple((padded[i] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(nd))
    out = []
    for offs in itertools.product(*(range(b) for b in block)):
        out.append(
            tuple(
                slice(o * dil[i], o * dil[i] + (grid[i] - 1) * strides[i] + 1, strides[i])
                for i, o in enumerate(offs)
            )
        )
    return out, grid


class Col2Im(Operation):
    """ONNX Col2Im: columns (N, C * prod(block), L) summed into an image (N, C, *image)
    (the inverse arrangement of im2col; overlapping entries add). The gradient reads
    the columns back out of dy."""

    def __init__(self, image: Sequence[int], block: Sequence[int], strides, pads, dilations):
        super().__init__()
        self.image, self.block = tuple(image), tuple(block)
        self.strides, self.pads, self.dilations = tuple(strides), tuple(pads), tuple(dilations)

    def _layout(self, n: int, cols: int):
        slices, grid = _col2im_slices(self.image, self.block, self.strides, self.pads, self.dilations)
        c = cols // int(np.prod(self.block))
        return slices, grid, c

    def forward(self, x):
        xp = array_module(x)
        nd = len(self.image)
        slices, grid, c = self._layout(x.shape[0], x.shape[1])
        padded = [self.image[i] + self.pads[i] + self.pads[i + nd] for i in range(nd)]
        y = xp.zeros((x.shape[0], c, *padded), dtype=x.dtype)
        cols = x.reshape(x.shape[0], c, len(slices), *grid)
        for k, sl in enumerate(slices):
            y[(slice(None), slice(None)) + sl] += cols[:, :, k]
        crop = tuple(slice(self.pads[i], self.pads[i] + self.image[i]) for i in range(nd))
        return xp.ascontiguousarray(y[(slice(None), slice(None)) + crop])

    def backward(self, dy):
        xp = array_module(dy)
        nd = len(self.image)
        slices, grid, c = self._layout(dy.shape[0], dy.shape[1] * int(np.prod(self.block)))
        pad_width = [(0, 0), (0, 0)] + [(self.pads[i], self.pads[i + nd]) for i in range(nd)]
        g = xp.pad(dy, pad_width)
        cols = xp.stack([g[(slice(None), slice(None)) + sl] for sl in slices], axis=2)
        return cols.reshape(dy.shape[0], -1, int(np.prod(grid)))


def col2im(
    x: Tensor,
    image_shape: Sequence[int],
    block_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
) -> Tensor:
    """ONNX Col2Im (PyTorch's ``fold``): ``x`` of shape (N, C * prod(block_shape), L),
    one column per block position, summed into an (N, C, *image_shape) image;
    ``pads`` are begin..., end... per spatial axis."""
    nd = len(image_shape)
    strides = tuple(strides or [1] * nd)
    pads = tuple(pads or [0] * (2 * nd))
    dilations = tuple(dilations or [1] * nd)
    _, grid = _col2im_slices(tuple(image_shape), tuple(block_shape), strides, pads, dilations)
    k = int(np.prod(block_shape))
    if x.ndim() != 3 or x.shape[1] % k or x.shape[2] != int(np.prod(grid)):
        raise ValueError(
            f"col2im: needs (N, C * {k}, {int(np.prod(grid))}) columns for image {tuple(image_shape)} and "
            f"block {tuple(block_shape)}, got {x.shape}"
        )
    return Col2Im(image_shape, block_shape, strides, pads, dilations)(x)[0]
