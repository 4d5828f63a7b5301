"""Small helpers from SINGA's ``singa.utils``: a progress bar, ONNX padding arithmetic,
odd-padding of arrays, and the post-order walk of a recorded autograd graph.

SINGA's ``same_pad_shape_check`` and ``re_new_handle`` work on its C++ convolution
handles and have no counterpart here.

Example::

    from singa import utils
    utils.get_output_shape("SAME_UPPER", [32, 32], [3, 3], [2, 2])        # [16, 16]
    utils.get_padding_shape("SAME_UPPER", [32, 32], [3, 3], [2, 2])       # ([0, 0, 0, 0], [0, 1, 0, 1])
"""

from __future__ import annotations

import math
import sys
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from singa.device import array_module

__all__ = [
    "force_unicode",
    "get_output_shape",
    "get_padding_shape",
    "handle_odd_pad_bwd",
    "handle_odd_pad_fwd",
    "post_order_recursive",
    "update_progress",
]

_BAR = 20


def update_progress(progress: float, info: str) -> str:
    """Draw ``[.....     ]  45.0% info`` on stdout and move the cursor back over it.

    ``progress`` in [0, 1]; negative shows "Halt.", 1 or more "Done.", a non-number
    "error: progress var must be float.". Returns the text drawn.
    """
    status = ""
    if isinstance(progress, bool) or not isinstance(progress, int | float):
        progress, status = 0.0, "error: progress var must be float. "
    elif progress < 0:
        progress, status = 0.0, "Halt. "
    elif progress >= 1:
        progress, status = 1.0, "Done. "
    status += info
    filled = int(round(_BAR * progress))
    text = f"[{'.' * filled}{' ' * (_BAR - filled)}] {progress * 100:3.1f}% {status}"
    sys.stdout.write(text + "\b" * len(text))
    sys.stdout.flush()
    return text


def get_output_shape(
    auto_pad: str,
    input_spatial_shape: Sequence[int],
    kernel_spatial_shape: Sequence[int],
    strides_spatial: Sequence[int],
) -> list[int]:
    """Output spatial sizes of a convolution or pooling under ONNX ``auto_pad``:
    ceil(in / stride) for SAME_UPPER / SAME_LOWER, ceil((in - kernel + 1) / stride) for VALID."""
    dims = zip(input_spatial_shape, kernel_spatial_shape, strides_spatial)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return [math.ceil(i / s) for i, _, s in dims]
    if auto_pad == "VALID":
        return [math.ceil((i - k + 1) / s) for i, k, s in dims]
    raise ValueError(f"get_output_shape: auto_pad must be SAME_UPPER, SAME_LOWER or VALID, got {auto_pad!r}")


def get_padding_shape(
    pad_mode: str,
    input_spatial_shape: Sequence[int],
    kernel_spatial_shape: Sequence[int],
    strides_spatial: Sequence[int],
) -> tuple[list[int], list[int]]:
    """Padding that gives :func:`get_output_shape`'s sizes, as ``(pads, odd_pads)``.

    ``pads`` is [begin_0, end_0, begin_1, end_1, ...] with the even part of each axis's
    total padding split equally; ``odd_pads`` (same layout) holds the one extra pixel
    of an odd total: at the end for SAME_UPPER, at the beginning otherwise.
    """
    out = get_output_shape(pad_mode, input_spatial_shape, kernel_spatial_shape, strides_spatial)
    pads, odd = [], []
    for o, i, k, s in zip(out, input_spatial_shape, kernel_spatial_shape, strides_spatial):
        total = max((o - 1) * s + k - i, 0)
        pads += [total // 2, total // 2]
        extra = total % 2
        odd += [0, extra] if pad_mode == "SAME_UPPER" else [extra, 0]
    return pads, odd


_ODD_SIDES = ((2, True), (2, False), (3, True), (3, False))  # (axis, at the beginning)


def handle_odd_pad_fwd(x: Any, odd_padding: Sequence[int], is_pool: bool = False) -> Any:
    """Add the extra rows/columns ``odd_padding`` = (top, bottom, left, right) to an
    (N, C, H, W) array: zeros, or for pooling copies of the border rows/columns."""
    xp = array_module(x)
    for (axis, begin), pad in zip(_ODD_SIDES, odd_padding):
        if not pad:
            continue
        n = x.shape[axis]
        if is_pool:
            edge = xp.take(x, range(0, pad) if begin else range(n - pad, n), axis=axis)
        else:
            shape = list(x.shape)
            shape[axis] = pad
            edge = xp.zeros(shape, x.dtype)
        x = xp.concatenate([edge, x] if begin else [x, edge], axis=axis)
    return x


def handle_odd_pad_bwd(dx: Any, odd_padding: Sequence[int]) -> Any:
    """Remove what :func:`handle_odd_pad_fwd` added from a gradient array."""
    xp = array_module(dx)
    for (axis, begin), pad in zip(_ODD_SIDES, odd_padding):
        if pad:
            n = dx.shape[axis]
            dx = xp.take(dx, range(pad, n) if begin else range(0, n - pad), axis=axis)
    return dx


def force_unicode(s: Any) -> Any:
    """``s`` decoded from UTF-8 when it is bytes, else ``s`` unchanged."""
    return s.decode("utf-8") if isinstance(s, bytes | bytearray) else s


def _op_name(op: Any) -> str:
    return op.name if getattr(op, "name", None) else f"{type(op).__name__}#{id(op)}"


def post_order_recursive(root: Any, root_t: Any) -> tuple[OrderedDict, OrderedDict, OrderedDict]:
    """Walk the graph recorded behind an operation, inputs before users.

    Args:
        root: the operation that produced ``root_t`` (``root_t.creator``).
        root_t: the output tensor.

    Returns ``(nodes, weights, inputs)``: operations by name (the operation's ``name``
    or ``Type#id``) in post order; leaf tensors that store gradients (parameters) by
    name; and the other leaf tensors (inputs, constants) by name. A tensor's name is
    its ``name`` or ``tensor#id``.
    """
    nodes: OrderedDict = OrderedDict()
    weights: OrderedDict = OrderedDict()
    inputs: OrderedDict = OrderedDict()
    seen: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        op, expanded = stack.pop()
        if op is None or (id(op) in seen and not expanded):
            continue
        if expanded:
            nodes[_op_name(op)] = op
            continue
        seen.add(id(op))
        stack.append((op, True))
        src = op.src or []
        for creator, _, t in src:
            if creator is None and t is not None:
                (weights if t.stores_grad else inputs)[t.name or f"tensor#{id(t)}"] = t
        stack += [(creator, False) for creator, _, _ in reversed(src) if creator is not None]
    return nodes, weights, inputs
