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

from singa.autograd.engine import Operation
from singa.tensor import Tensor

__all__ = ["depth_to_space", "space_to_depth", "DepthToSpace", "SpaceToDepth"]

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
