"""Shape operators: views, joins, splits, padding, expand and tile (indexing:
:mod:`singa.autograd.indexing`).

Forward results of the pure view operators (reshape, transpose, slice, split) share
memory with their input, as numpy views do. The helpers ``check_axis``, ``axes_list``,
``scatter_add`` and ``lift`` are shared with the indexing family.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from singa.autograd.engine import Operation, unbroadcast
from singa.device import array_module
from singa.kernels import joins
from singa.kernels.scatter import add_rows, add_rows_applies
from singa.tensor import Tensor

__all__ = [
    "reshape",
    "flatten",
    "transpose",
    "cat",
    "split",
    "slice",
    "squeeze",
    "unsqueeze",
    "pad",
    "expand",
    "tile",
]

_slice = builtins.slice  # this module defines its own ``slice``
_Ints = Sequence[int]


def check_axis(axis: int, ndim: int, op: str) -> int:
    """``axis`` made non-negative; ValueError naming ``op`` when out of range."""
    a = int(axis)
    if not -ndim <= a < ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for a tensor with {ndim} dimensions")
    return a + ndim if a < 0 else a


def axes_list(axes: Any) -> list[int]:
    """An int or a sequence of ints as a list of ints."""
    return [int(axes)] if isinstance(axes, int | np.integer) else [int(a) for a in axes]


def scatter_add(xp: Any, a: Any, key: Any, v: Any) -> None:
    """a[key] += v with repeated indices accumulated (ufunc.at; cupyx.scatter_add on
    cupy versions without ``cupy.add.at``; whole rows by a compiled kernel when ``key``
    indexes the first axis of a float numpy array)."""
    if xp is np and add_rows_applies(a, key, v):
        add_rows(a, key[0], v)
    elif xp is np or hasattr(xp.add, "at"):
        xp.add.at(a, key, v)
    else:  # pragma: no cover - old cupy
        import cupyx

        cupyx.scatter_add(a, key, v)


def lift(v: Any, like: Tensor, dtype: Any = None) -> Tensor:
    """A constant Tensor on ``like``'s device from a Tensor, array, list or number."""
    if isinstance(v, Tensor):
        return v
    xp = like.device.xp
    return Tensor.wrap(xp.asarray(v, dtype=dtype if dtype is not None else like.dtype), like.device)


# ----- reshape, flatten, transpose -------------------------------------------------------
def _resolve_shape(in_shape: tuple, shape: tuple) -> tuple | None:
    """ONNX Reshape target: 0 copies the input dim, one -1 is inferred; None if invalid."""
    out = []
    for i, s in enumerate(shape):
        if s == 0:
            if i >= len(in_shape):
                return None
            s = in_shape[i]
        elif s < -1:
            return None
        out.append(s)
    size = math.prod(in_shape)
    if out.count(-1) > 1:
        return None
    if -1 in out:
        rest = math.prod(s for s in out if s != -1)
        if rest == 0 or size % rest:
            return None
        out[out.index(-1)] = size // rest
    return tuple(out) if math.prod(out) == size else None


class Reshape(Operation):
    """y = x viewed with a new shape (ONNX Reshape: one entry may be -1, 0 keeps that
    input dim)."""

    def __init__(self, shape: Sequence[int]):
        super().__init__()
        self.shape = tuple(int(s) for s in shape)

    def forward(self, x):
        if self.requires_grad:
            self.cache = x.shape
        return x.reshape(tuple(x.shape[i] if s == 0 else s for i, s in enumerate(self.shape)))

    def backward(self, dy):
        return dy.reshape(self.cache)


def reshape(x: Tensor, shape: Sequence[int] | int) -> Tensor:
    """``x`` with a new shape of the same size (ONNX Reshape: a 0 keeps the input's
    dim at that position, one -1 is inferred)."""
    shape = (int(shape),) if isinstance(shape, int | np.integer) else tuple(int(s) for s in shape)
    if _resolve_shape(tuple(x.shape), shape) is None:
        raise ValueError(f"reshape: cannot reshape a tensor of shape {x.shape} to {shape}")
    return Reshape(shape)(x)[0]


class Flatten(Operation):
    """ONNX Flatten: y has shape (prod(x.shape[:axis]), prod(x.shape[axis:]))."""

    def __init__(self, axis: int = 1):
        super().__init__()
        self.axis = axis

    def forward(self, x):
        if self.requires_grad:
            self.cache = x.shape
        return x.reshape(math.prod(x.shape[: self.axis]), math.prod(x.shape[self.axis :]))

    def backward(self, dy):
        return dy.reshape(self.cache)


def flatten(x: Tensor, axis: int = 1) -> Tensor:
    """Flatten ``x`` to a matrix (ONNX Flatten): the dims before ``axis`` make the rows,
    the rest the columns; ``axis`` may be negative (counted from the end) and is in
    [-ndim, ndim]."""
    r = x.ndim()
    if not -r <= axis <= r:
        raise ValueError(f"flatten: axis {axis} is out of range for a tensor of shape {x.shape}")
    return Flatten(axis + r if axis < 0 else axis)(x)[0]


class Transpose(Operation):
    """y = x with its axes permuted (reversed when ``perm`` is None)."""

    def __init__(self, perm: Any = None):
        super().__init__()
        self.perm = None if perm is None else tuple(perm)

    def forward(self, x):
        return x.transpose(self.perm)

    def backward(self, dy):
        if self.perm is None:
            return dy.transpose()
        return dy.transpose(np.argsort(self.perm).tolist())


def transpose(x: Tensor, shape: Sequence[int] | None = None) -> Tensor:
    """Permute the axes of ``x`` (SINGA calls the permutation ``shape``; None reverses
    them; negative entries count from the end)."""
    if shape is not None:
        r = x.ndim()
        perm = [int(p) + r if int(p) < 0 else int(p) for p in shape]
        if sorted(perm) != list(range(r)):
            raise ValueError(f"transpose: {tuple(shape)} is not a permutation of the axes of shape {x.shape}")
        shape = perm
    return Transpose(shape)(x)[0]


# ----- cat and split -----------------------------------------------------------------------
class Cat(Operation):
    """y = the inputs joined along ``axis``."""

    def __init__(self, axis: int = 0):
        super().__init__()
        self.axis = axis

    def forward(self, *xs):
        if self.requires_grad:
            self.cache = [x.shape[self.axis] for x in xs]
        return array_module(xs[0]).concatenate(xs, axis=self.axis)

    def backward(self, dy):
        out = []
        start = 0
        pre = (_slice(None),) * self.axis
        for n, need in zip(self.cache, self.needs_grad):
            out.append(dy[pre + (_slice(start, start + n),)] if need else None)
            start += n
        return tuple(out)


def cat(xs: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Concatenate tensors of the same shape except along ``axis`` (may be negative)."""
    xs = list(xs)
    if not xs:
        raise ValueError("cat: needs at least one tensor")
    shapes = [tuple(x.shape) for x in xs]
    r = len(shapes[0])
    ok = r > 0 and all(len(s) == r for s in shapes) and -r <= axis < r
    if ok:
        ax = axis + r if axis < 0 else axis
        ok = all(s[:ax] + s[ax + 1 :] == shapes[0][:ax] + shapes[0][ax + 1 :] for s in shapes)
    if not ok:
        raise ValueError(f"cat: shapes {shapes} cannot be joined along axis {axis}")
    return Cat(ax)(*xs)[0]


class Split(Operation):
    """ys = x cut along ``axis`` into pieces of sizes ``parts``."""

    def __init__(self, axis: int, parts: Sequence[int]):
        super().__init__()
        self.axis = axis
        self.parts = tuple(parts)

    def forward(self, x):
        pre = (_slice(None),) * self.axis
        out = []
        start = 0
        for n in self.parts:
            out.append(x[pre + (_slice(start, start + n),)])
            start += n
        return tuple(out)

    def backward(self, *dys):
        xp = array_module(dys[0])
        return joins.concatenate(dys, self.axis) if xp is np else xp.concatenate(dys, axis=self.axis)


def split(x: Tensor, axis: int, parts: Sequence[int] | int) -> tuple:
    """Cut ``x`` along ``axis`` into pieces: ``parts`` is a list of sizes (summing to
    the dim) or an int number of equal pieces. Returns a tuple of tensors."""
    ax = check_axis(axis, x.ndim(), "split")
    n = x.shape[ax]
    if isinstance(parts, int | np.integer):
        if parts <= 0 or n % parts:
            raise ValueError(f"split: dim {n} of shape {x.shape} (axis {axis}) is not divisible into {parts}")
        sizes = [n // int(parts)] * int(parts)
    else:
        sizes = [int(p) for p in parts]
        if not sizes or any(p < 0 for p in sizes) or builtins.sum(sizes) != n:
            raise ValueError(
                f"split: sizes {sizes} do not add up to dim {n} of shape {x.shape} (axis {axis})"
            )
    return Split(ax, sizes)(x)


# ----- slicing -----------------------------------------------------------------------------
def _slice_key(shape: tuple, starts, ends, axes, steps) -> tuple:
    """Python slices for ONNX Slice (negative indices count from the end; out-of-range
    indices are clamped; negative steps run backwards)."""
    r = len(shape)
    starts, ends = axes_list(starts), axes_list(ends)
    axes = list(range(len(starts))) if axes is None else axes_list(axes)
    steps = [1] * len(starts) if steps is None else axes_list(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ValueError(
            f"slice: starts {starts}, ends {ends}, axes {axes} and steps {steps} differ in length"
        )
    key = [_slice(None)] * r
    seen = set()
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = check_axis(a, r, "slice")
        if a in seen:
            raise ValueError(f"slice: axis {a} appears twice in axes {axes}")
        seen.add(a)
        if st == 0:
            raise ValueError("slice: steps must not be 0")
        d = shape[a]
        s = s + d if s < 0 else s
        e = e + d if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
        else:
            s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
            if e == -1:
                e = None
        key[a] = _slice(s, e, st)
    return tuple(key)


class Slice(Operation):
    """ONNX Slice; ``key`` holds the resolved Python slices per axis."""

    def __init__(self, starts, ends, axes, steps, key: tuple):
        super().__init__()
        self.starts, self.ends, self.axes, self.steps = starts, ends, axes, steps
        self.key = key

    def forward(self, x):
        if self.requires_grad:
            self.cache = x.shape
        return x[self.key]

    def backward(self, dy):
        dx = array_module(dy).zeros(self.cache, dtype=dy.dtype)
        dx[self.key] = dy
        return dx


def slice(
    x: Tensor, starts: _Ints, ends: _Ints, axes: _Ints | None = None, steps: _Ints | None = None
) -> Tensor:
    """ONNX Slice: ``x[starts[i]:ends[i]:steps[i]]`` along ``axes[i]`` (default: the
    first len(starts) axes, steps 1). Negative indices count from the end, indices
    beyond the ends are clamped, negative steps walk backwards."""
    key = _slice_key(tuple(x.shape), starts, ends, axes, steps)
    return Slice(starts, ends, axes, steps, key)(x)[0]


# ----- squeeze and unsqueeze ---------------------------------------------------------------
class Squeeze(Operation):
    """y = x without the size-1 axes ``axes`` (all of them when None)."""

    def __init__(self, axes: tuple | None):
        super().__init__()
        self.axes = axes

    def forward(self, x):
        if self.requires_grad:
            self.cache = x.shape
        if self.axes is None:
            return x.reshape(tuple(d for d in x.shape if d != 1))
        return x.reshape(tuple(d for i, d in enumerate(x.shape) if i not in self.axes))

    def backward(self, dy):
        return dy.reshape(self.cache)


def squeeze(x: Tensor, axis: int | Sequence[int] | None = None) -> Tensor:
    """Remove size-1 axes: those listed in ``axis`` (int or list, may be negative),
    or every size-1 axis when None. ValueError if a listed axis is not of size 1."""
    axes = None
    if axis is not None:
        axes = tuple(sorted({check_axis(a, x.ndim(), "squeeze") for a in axes_list(axis)}))
        bad = [a for a in axes if x.shape[a] != 1]
        if bad:
            raise ValueError(f"squeeze: axes {bad} of shape {x.shape} do not have size 1")
    return Squeeze(axes)(x)[0]


class Unsqueeze(Operation):
    """y = x with size-1 axes inserted at ``axes`` (positions in the output)."""

    def __init__(self, axes: tuple):
        super().__init__()
        self.axes = axes

    def forward(self, x):
        if self.requires_grad:
            self.cache = x.shape
        shape = list(x.shape)
        for a in self.axes:
            shape.insert(a, 1)
        return x.reshape(shape)

    def backward(self, dy):
        return dy.reshape(self.cache)


def unsqueeze(x: Tensor, axis: int | Sequence[int]) -> Tensor:
    """Insert size-1 axes (ONNX Unsqueeze): ``axis`` (int or list) names positions in
    the output, negative ones counted from the output's end."""
    given = axes_list(axis)
    r = x.ndim() + len(given)
    axes = sorted(check_axis(a, r, "unsqueeze") for a in given)
    if len(set(axes)) != len(axes):
        raise ValueError(f"unsqueeze: repeated axes in {given}")
    return Unsqueeze(tuple(axes))(x)[0]


# ----- pad and expand ------------------------------------------------------------------------
class Pad(Operation):
    """ONNX Pad in modes constant, reflect and edge; negative pads crop."""

    def __init__(self, mode: str, pads: tuple, constant: float = 0.0):
        super().__init__()
        self.mode = mode
        self.pads = pads
        self.constant = constant

    def _parts(self, shape: tuple) -> tuple:
        r = len(shape)
        begin, end = self.pads[:r], self.pads[r:]
        crop = tuple(_slice(max(-b, 0), d - max(-e, 0)) for b, e, d in zip(begin, end, shape))
        widths = tuple((max(b, 0), max(e, 0)) for b, e in zip(begin, end))
        return crop, widths

    def forward(self, x):
        xp = array_module(x)
        crop, widths = self._parts(x.shape)
        if self.requires_grad:
            self.cache = x.shape
        xc = x[crop]
        if self.mode != "constant":
            return xp.pad(xc, widths, mode=self.mode)
        out = xp.full(tuple(d + b + e for d, (b, e) in zip(xc.shape, widths)), self.constant, dtype=x.dtype)
        out[tuple(_slice(b, b + d) for d, (b, _) in zip(xc.shape, widths))] = xc
        return out

    def backward(self, dy):
        xp = array_module(dy)
        shape = self.cache
        crop, widths = self._parts(shape)
        g = dy
        inner = [c.stop - c.start for c in crop]
        for ax, ((b, e), n) in enumerate(zip(widths, inner)):
            if b == 0 and e == 0:
                continue
            pre = (_slice(None),) * ax
            core = g[pre + (_slice(b, b + n),)]
            if self.mode == "constant" or n == 0:
                g = core
                continue
            core = core.copy()
            # add each padded position's gradient to where it was copied from (numpy's own
            # padding rule), one vectorised update per side
            src = np.pad(np.arange(n), (b, e), mode=self.mode)
            for lo, hi in ((0, b), (b + n, b + n + e)):
                if lo == hi:
                    continue
                vals = g[pre + (_slice(lo, hi),)]
                s = src[lo:hi]
                if hi - lo == 1 or (self.mode == "reflect" and hi - lo < n):
                    # one position, or one reflection: the sources are a descending run
                    run = _slice(int(s.min()), int(s.max()) + 1)
                    core[pre + (run,)] += vals[pre + (_slice(None, None, -1),)]
                elif self.mode == "edge":  # every position copies one element: add their sum
                    total = xp.moveaxis(vals, ax, -1) @ xp.ones(hi - lo, dtype=vals.dtype)
                    core[pre + (_slice(int(s[0]), int(s[0]) + 1),)] += xp.expand_dims(total, ax)
                else:  # repeated mirroring: sources repeat, accumulate unbuffered
                    scatter_add(xp, core, pre + (xp.asarray(s),), vals)
            g = core
        if g.shape == tuple(shape):
            return g
        dx = xp.zeros(shape, dtype=dy.dtype)
        dx[crop] = g
        return dx


def pad(
    x: Tensor, mode: str = "constant", pads: Sequence[int] | None = None, constant: float = 0.0
) -> Tensor:
    """ONNX Pad. ``pads`` lists [x1_begin, x2_begin, ..., x1_end, x2_end, ...], two
    entries per axis (negative entries crop); ``mode`` is "constant" (fill with
    ``constant``), "reflect" (mirror without repeating the edge) or "edge"."""
    if mode not in ("constant", "reflect", "edge"):
        raise ValueError(f"pad: mode must be 'constant', 'reflect' or 'edge', got {mode!r}")
    r = x.ndim()
    if pads is None or len(pads) != 2 * r:
        raise ValueError(f"pad: pads must have 2 * ndim = {2 * r} entries for shape {x.shape}, got {pads}")
    pads = tuple(int(p) for p in pads)
    inner = [d + min(b, 0) + min(e, 0) for d, b, e in zip(x.shape, pads[:r], pads[r:])]
    if any(n < 0 for n in inner) or any(
        n == 0 and (b > 0 or e > 0) and mode != "constant" for n, b, e in zip(inner, pads[:r], pads[r:])
    ):
        raise ValueError(f"pad: pads {pads} do not fit shape {x.shape} in mode {mode!r}")
    return Pad(mode, pads, constant)(x)[0]


class Expand(Operation):
    """y = x broadcast to ``shape`` (materialised)."""

    def __init__(self, shape: tuple):
        super().__init__()
        self.shape = shape

    def forward(self, x):
        if self.requires_grad:
            self.cache = x.shape
        xp = array_module(x)
        return xp.broadcast_to(x, np.broadcast_shapes(x.shape, self.shape)).copy()

    def backward(self, dy):
        return unbroadcast(dy, self.cache)


def expand(x: Tensor, shape: Sequence[int]) -> Tensor:
    """ONNX Expand: broadcast ``x`` and ``shape`` against each other (numpy rules,
    aligned on the right) and return ``x`` repeated to the result's shape."""
    shape = tuple(int(s) for s in shape)
    try:
        np.broadcast_shapes(tuple(x.shape), shape)
    except ValueError:
        raise ValueError(f"expand: shape {x.shape} cannot be broadcast to {shape}") from None
    return Expand(shape)(x)[0]


class Tile(Operation):
    """y = x repeated ``repeats[i]`` times along each axis i (numpy ``tile``, ONNX Tile).
    ``repeats`` has one entry per output axis: more than x has puts leading axes of size
    1 before x's (numpy's rule); the gradient has x's own shape."""

    def __init__(self, repeats: tuple):
        super().__init__()
        self.repeats = repeats

    def forward(self, x):
        if self.requires_grad:
            self.cache = x.shape
        return array_module(x).tile(x, self.repeats)

    def backward(self, dy):
        shape = self.cache
        full = (1,) * (len(self.repeats) - len(shape)) + tuple(shape)
        # dy viewed as (r0, n0, r1, n1, ...): the copies of x lie along the r axes
        split = tuple(d for r, n in zip(self.repeats, full) for d in (r, n))
        return dy.reshape(split).sum(axis=tuple(range(0, len(split), 2))).reshape(shape)


def tile(x: Tensor, repeats: int | Sequence[int]) -> Tensor:
    """``x`` repeated along its axes, as numpy's ``tile``: ``repeats`` is an int or one
    int >= 1 per axis; fewer entries than axes repeat the last axes, more entries add
    leading axes of size 1 first. (Apache SINGA's ``tile`` matches fewer entries to the
    first axes instead, unlike the numpy function its documentation cites.)"""
    reps = (repeats,) if isinstance(repeats, int | np.integer) else tuple(repeats)
    if not reps or any(not isinstance(r, int | np.integer) or r < 1 for r in reps):
        raise ValueError(f"tile: repeats must be an int or a sequence of ints >= 1, got {repeats!r}")
    reps = tuple(int(r) for r in reps)
    reps = (1,) * (x.ndim() - len(reps)) + reps
    return Tile(reps)(x)[0]
