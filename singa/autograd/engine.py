"""The autograd engine: :class:`Operation`, the ``backward`` walker and ``no_grad``.

An Operation runs on raw arrays (numpy or cupy). Calling it on Tensors:

1. records ``.src``, one ``(creator, index, tensor)`` per input: for an input that
   requires a gradient and has a creator, the creator, the index of the input among
   its outputs, and the tensor itself when it stores its gradient (else None); for
   any other input (a leaf: parameters, input batches, labels, constants made in
   forward) ``(None, 0, input)``. This is the whole recorded graph, which
   ``sonnx.to_onnx(inputs, [y])`` walks back from ``y``; intermediate values are
   reached through their creators only, never kept by the entry;
2. runs ``forward(*arrays)``, which keeps what ``backward`` will need in
   ``self.cache`` (and only when ``self.requires_grad`` is True);
3. wraps the outputs in Tensors whose ``creator`` is the operation.

``backward(*dys)`` returns one gradient per input (None where an input needs none,
see ``self.needs_grad``). Nothing is recorded while ``autograd.training`` is False
or inside ``no_grad()``.

While a device's ``recorder`` is set (graph tracing, ONNX export), every array
computation on it is reported as ``recorder.record(fn, in_arrays, out_arrays, op=None,
tensors=None, is_backward=False)``: ``fn(*in_arrays)`` recomputes ``out_arrays``
(a tuple; empty for in-place updates). Forward calls pass ``op`` and the input
``tensors``; backward calls pass ``op`` and ``is_backward=True``; gradient sums pass
neither (their ``fn`` is :func:`sum_gradients`); the optimizers record their
in-place updates themselves, as :class:`DonatingUpdate` calls. Arrays that no
recorded call produced are inputs, parameters or constants.

Two declarations let graph replay (``sequential=False``) reuse dead buffers; both are
plain references to functions, never names looked up as strings:

- an operator lists its in-place variants in the class attributes
  ``forward_inplace`` / ``backward_inplace`` (see :class:`Operation`);
- an update recorded as a :class:`DonatingUpdate` accepts ``donate=True``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import numpy as np

import singa.autograd as _state
from singa.tensor import Tensor


class Operation:
    """Base class of every differentiable operator.

    Subclasses implement ``forward(*xs)`` and ``backward(*dys)`` on arrays. Keep
    hyperparameters (stride, axis, ...) as attributes: graph replay and the ONNX
    exporter read them. Keep arrays needed by backward only in ``self.cache``; the
    engine drops it once backward has run.

    Example::

        class Square(Operation):
            def forward(self, x):
                if self.requires_grad:
                    self.cache = x
                return x * x

            def backward(self, dy):
                return 2 * self.cache * dy

        y = Square()(x)[0]
    """

    #: number of outputs; set by ``__call__`` from what ``forward`` returns
    n_out = 1
    #: in-place variants of ``forward``: ``(variant, k)`` pairs where
    #: ``variant(op, *arrays)`` computes what ``op.forward(*arrays)`` does (same bits,
    #: same ``cache``) writing the result into input ``k`` and returning it. Graph
    #: replay checks each one while tracing and uses it when input ``k`` is dead.
    forward_inplace: tuple = ()
    #: the same for ``backward`` (``variant(op, *dys)`` writes into ``dys[k]``)
    backward_inplace: tuple = ()

    def __init__(self, name: str | None = None):
        self.name = name
        self.src: list | None = None
        self.requires_grad = False
        self.needs_grad: tuple = ()
        self.cache: Any = None

    def __call__(self, *xs: Tensor) -> tuple:
        """Run forward on the inputs' arrays and return a tuple of output Tensors
        (through ``autograd.autocast`` when a precision policy is active)."""
        policy = _state.autocast
        if policy is not None:
            return policy.call(self, xs)
        return self.apply_to(xs)

    def apply_to(self, xs: tuple) -> tuple:
        """``self(*xs)`` without the precision policy: the inputs are used as given."""
        dev = xs[0].device
        needs = tuple(x.requires_grad for x in xs)
        self.requires_grad = record = _state.training and any(needs)
        self.needs_grad = needs
        arrays = [x.data for x in xs]
        if dev.profiler is None:
            ys = self.forward(*arrays)
        else:  # SetVerbosity: time the kernel
            ys = dev.profiler.run(self, self.forward, arrays, "forward")
        if not isinstance(ys, tuple):
            ys = (ys,)
        self.n_out = len(ys)
        if dev.recorder is not None:
            dev.recorder.record(self.forward, arrays, ys, op=self, tensors=xs)
        if record:
            if len(ys) > 1:
                self.out_meta = [(y.shape, y.dtype) for y in ys]
            self.src = [
                (x.creator, x._index, x if x.stores_grad else None)
                if x.creator is not None and x.requires_grad
                else (None, 0, x)
                for x in xs
            ]
            return tuple(Tensor._wrap(y, dev, True, self, i) for i, y in enumerate(ys))
        self.cache = None
        return tuple(Tensor._wrap(y, dev) for y in ys)

    def forward(self, *xs: Any) -> Any:
        """Compute the outputs from input arrays; returns an array or a tuple of arrays."""
        raise NotImplementedError(f"{type(self).__name__}.forward")

    def backward(self, *dys: Any) -> Any:
        """Gradients of the inputs from the outputs' gradients (array, tuple or None)."""
        raise NotImplementedError(f"{type(self).__name__}.backward")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


Operator = Operation


@contextlib.contextmanager
def no_grad() -> Iterator[None]:
    """Within this block no graph is recorded (``autograd.training`` is False)."""
    prev = _state.training
    _state.training = False
    try:
        yield
    finally:
        _state.training = prev


def _accumulate(dev: Any, acc: Any, g: Any) -> Any:
    """acc + g for gradients arriving along several paths (recorded when tracing)."""
    if acc is None:
        return g
    out = acc + g
    if dev.recorder is not None:
        dev.recorder.record(sum_gradients, [acc, g], (out,))
    return out


def sum_gradients(a: Any, b: Any) -> Any:
    """``a + b``: the recorded call that sums gradients arriving along several paths."""
    return a + b


class DonatingUpdate(functools.partial):
    """A recorded in-place update ``update(*arrays, donate=False)`` (a partial of the
    update function). With ``donate=True`` the caller hands over the last array (the
    gradient), which the update may then overwrite: graph replay passes it when that
    array is dead and held by nothing else."""


def _count_dependencies(root: Operation) -> tuple[dict, dict, dict]:
    """For every operation reachable from ``root``: how many input edges consume it.

    Returns (op -> count, leaf tensor -> count, op -> {output index: tensor that
    stores its gradient}).
    """
    op_deps: dict = {}
    leaf_deps: dict = {}
    stored: dict = {}
    seen = {root}
    stack = [root]
    while stack:
        op = stack.pop()
        if op.src is None:
            raise RuntimeError(
                f"backward through {type(op).__name__} whose graph was already released "
                "(backward was run on it before, or it ran without autograd.training)"
            )
        for s in op.src:
            if s is None:
                continue
            creator, idx, t = s
            if creator is None:  # a leaf: only those storing (and requiring) a gradient count
                if t is not None and t.stores_grad and t.requires_grad:
                    leaf_deps[t] = leaf_deps.get(t, 0) + 1
                continue
            op_deps[creator] = op_deps.get(creator, 0) + 1
            if t is not None and t.stores_grad:
                stored.setdefault(creator, {})[idx] = t
            if creator not in seen:
                seen.add(creator)
                stack.append(creator)
    return op_deps, leaf_deps, stored


def backward(y: Tensor, dy: Any = None) -> Iterator[tuple[Tensor, Tensor]]:
    """Back-propagate from ``y``; yield ``(tensor, gradient)`` for every tensor that
    stores its gradient, once, as soon as all contributions to it are summed.

    Args:
        y: the tensor to differentiate (usually a scalar loss).
        dy: the gradient of ``y``; required when ``y`` has more than one element.

    The graph is released as the walk goes, so each graph can be walked once.

    Example::

        for p, g in autograd.backward(loss):
            sgd.update(p, g)
    """
    dev = y.device
    xp = dev.xp
    if dy is None:
        if y.size() != 1:
            raise ValueError(f"backward: y has shape {y.shape}; pass dy for a non-scalar y")
        dy_arr = xp.ones(y.shape, dtype=y.dtype)
    else:
        dy_arr = dy.data if isinstance(dy, Tensor) else xp.asarray(dy, dtype=y.dtype)
        if dy_arr.shape != y.shape:
            raise ValueError(f"backward: dy has shape {dy_arr.shape}, y has shape {y.shape}")
    if y.creator is None:
        if not y.requires_grad:
            raise RuntimeError(
                "backward: y has no recorded graph; set autograd.training = True before computing it"
            )
        if y.stores_grad:
            yield y, Tensor._wrap(dy_arr, dev)
        return
    root = y.creator
    op_deps, leaf_deps, stored = _count_dependencies(root)
    grads: dict = {root: [None] * root.n_out}
    grads[root][y._index] = dy_arr
    leaf_grads: dict = {}
    ready = [root]
    while ready:
        op = ready.pop()
        dys = grads.pop(op)
        for idx, t in stored.pop(op, {}).items():
            if dys[idx] is not None:
                yield t, Tensor._wrap(dys[idx], dev)
        if all(d is None for d in dys):
            dxs: tuple = (None,) * len(op.src)
        else:
            if op.n_out > 1:
                dys = [xp.zeros(*m) if d is None else d for d, m in zip(dys, op.out_meta)]
            if dev.profiler is None:
                dxs = op.backward(*dys)
            else:
                dxs = dev.profiler.run(op, op.backward, dys, "backward")
            if not isinstance(dxs, tuple):
                dxs = (dxs,)
            if dev.recorder is not None:
                dev.recorder.record(op.backward, list(dys), dxs, op=op, is_backward=True)
        src = op.src
        op.src = None
        op.cache = None
        for s, dx in zip(src, dxs):
            if s is None:
                continue
            creator, idx, t = s
            if creator is None:
                if t is None or not (t.stores_grad and t.requires_grad):
                    continue
                if dx is not None:
                    leaf_grads[t] = _accumulate(dev, leaf_grads.get(t), dx)
                leaf_deps[t] -= 1
                if leaf_deps[t] == 0:
                    g = leaf_grads.pop(t, None)
                    if g is not None:
                        yield t, Tensor._wrap(g, dev)
                continue
            slot = grads.get(creator)
            if slot is None:
                slot = grads[creator] = [None] * creator.n_out
            if dx is not None:
                slot[idx] = _accumulate(dev, slot[idx], dx)
            op_deps[creator] -= 1
            if op_deps[creator] == 0:
                ready.append(creator)


def gradients(y: Tensor, dy: Any = None) -> dict:
    """All gradients of ``y`` as a dict ``{tensor: gradient}`` (see :func:`backward`)."""
    return dict(backward(y, dy))


def array_module(a: Any) -> Any:
    """The array module (numpy or cupy) that ``a`` belongs to."""
    if isinstance(a, np.ndarray | np.generic):
        return np
    import cupy

    return cupy


def check_same_dtype(opname: str, *tensors: Tensor, floating: bool = False) -> None:
    """Raise ValueError naming ``opname`` and the dtypes when the tensors' dtypes differ
    (or, with ``floating``, are not floating point), before anything runs."""
    dtypes = [t.dtype for t in tensors if t is not None]
    if any(d != dtypes[0] for d in dtypes) or (floating and dtypes[0].kind != "f"):
        names = " and ".join(str(d) for d in dtypes)
        need = "floating-point inputs of one dtype" if floating else "inputs of one dtype"
        raise ValueError(f"{opname}: needs {need}, got {names}")


def unbroadcast(g: Any, shape: tuple) -> Any:
    """Sum a broadcast gradient ``g`` back down to ``shape``."""
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        i + lead for i, n in enumerate(shape) if n == 1 and g.shape[i + lead] != 1
    )
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g.reshape(shape)
