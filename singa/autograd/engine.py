"""The autograd engine: :class:`Operation`, the ``backward`` walker and ``no_grad``.

An Operation runs on raw arrays (numpy or cupy). Calling it on Tensors:

1. runs ``forward(*arrays)``, which keeps what ``backward`` will need in
   ``self.cache``, only when ``self.requires_grad`` is True: ``autograd.training`` is
   True and some input requires a gradient (``needs_grad`` says which);
2. records ``.src``, one ``(creator, index, tensor)`` per input, whatever
   ``autograd.training`` says (as SINGA's operators do): for an input with a creator,
   the creator, the index of the input among its outputs, and the tensor itself when
   it stores its gradient (else None); for a leaf (parameters, input batches, labels,
   constants made in forward) ``(None, 0, input)``. This is the whole recorded graph,
   which ``sonnx.to_onnx(inputs, [y])`` walks back from ``y``; intermediate values are
   reached through their creators only, never kept by the entry;
3. wraps the outputs in Tensors whose ``creator`` is the operation and which require
   a gradient when some input does.

``backward(*dys)`` returns one gradient per input (None where an input needs none,
see ``self.needs_grad``), or per leading input only: inputs that never get a gradient
(indices, conditions, targets) may be left off the end, as SINGA's operators, which
keep such inputs as attributes, return only the gradients of the others. The
:func:`backward` walker sets ``needs_grad`` before calling it so that only gradients
reaching a tensor that stores its gradient are computed. Nothing at all is recorded inside ``no_grad()``.

User code may call an operator's ``backward`` directly (SINGA's tests write
``dx = y.creator.backward(dy.data)`` and then ``dx.shape()``): such a call returns the
numpy gradients as :class:`~singa.autograd.gradient_array.GradientArray` views, whose
``shape`` can also be called. The walker and graph replay call the class's own
function instead (``_backward_arrays``, see :meth:`Operation.__init_subclass__`) and
get plain arrays.

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
import math
import types
from collections.abc import Iterator
from typing import Any

import numpy as np

from singa.autograd.gradient_array import gradient_views
from singa.device import array_module  # noqa: F401  (kept importable here for operator code)
from singa.kernels import adds
from singa.tensor import Tensor

#: the object holding the user-visible switches ``training`` and ``autocast``: the
#: ``singa.autograd`` package binds itself here when it is imported (see
#: :func:`bind_switches`), so that ``autograd.training = True`` reaches the engine while
#: the engine never imports the package above it
_state: Any = types.SimpleNamespace(training=False, autocast=None)


def bind_switches(holder: Any) -> None:
    """Read ``training`` and ``autocast`` from ``holder`` from now on (the
    ``singa.autograd`` package passes itself)."""
    global _state
    _state = holder


def is_training() -> bool:
    """The value of ``autograd.training``."""
    return bool(_state.training)


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
    #: whether a gradient of an output can reach a tensor that stores its gradient
    reaches_stored = False
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
        self.reaches_stored = False

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
        self.requires_grad = keep = _state.training and any(needs)
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
        if not _recording:
            self.cache = None
            return tuple(Tensor.wrap(y, dev) for y in ys)
        if keep:
            if len(ys) > 1:
                self.out_meta = [(y.shape, y.dtype) for y in ys]
            self.reaches_stored = any(_leads_to_stored(x) for x in xs)
        else:
            self.cache = None
            self.reaches_stored = False
        self.src = [
            (x.creator, x._index, x if x.stores_grad else None) if x.creator is not None else (None, 0, x)
            for x in xs
        ]
        rg = any(needs)
        return tuple(Tensor.wrap(y, dev, rg, self, i) for i, y in enumerate(ys))

    def forward(self, *xs: Any) -> Any:
        """Compute the outputs from input arrays; returns an array or a tuple of arrays."""
        raise NotImplementedError(f"{type(self).__name__}.forward")

    def backward(self, *dys: Any) -> Any:
        """Gradients of the inputs from the outputs' gradients (array, tuple or None)."""
        raise NotImplementedError(f"{type(self).__name__}.backward")

    #: the function the walker and graph replay call: ``backward`` as its class wrote it
    _backward_arrays = backward

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Keep the ``backward`` a subclass defines as ``_backward_arrays`` and expose
        a ``backward`` that views its numpy results as
        :class:`~singa.autograd.gradient_array.GradientArray` (``dx.shape()`` works).

        Why this way: subclasses, ours and SINGA users', define ``backward`` on plain
        arrays, and the engine must call exactly that function with nothing added per
        call (a speed and a bitwise matter: graph replay records the function it is
        given and calls it on every step). Only a direct call from user code should
        see the views. Wrapping once, when the class is created, gives both with no
        per-call test: the walker calls ``op._backward_arrays``, users call
        ``op.backward``. A ``backward`` reached through ``super().backward`` from a
        subclass's own backward returns plain arrays, as the subclass's code expects.
        Define ``backward`` in the class body: one assigned to the class later is not
        seen by the walker.
        """
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("backward")
        if own is None:
            return
        raw = getattr(own, "_backward_arrays", own)
        cls._backward_arrays = raw
        if isinstance(raw, types.FunctionType):
            cls.backward = _viewing_backward(raw)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _viewing_backward(raw: Any) -> Any:
    """``raw`` (a class's backward) for user code: numpy results as GradientArray views."""

    @functools.wraps(raw)
    def backward(self: Operation, *dys: Any, **kwargs: Any) -> Any:
        out = raw(self, *dys, **kwargs)
        if type(self).backward is not backward:  # reached by super() from a subclass's backward
            return out
        return gradient_views(out)

    backward._backward_arrays = raw  # pyright: ignore[reportAttributeAccessIssue]  (a function attribute)
    return backward


Operator = Operation

#: False inside ``no_grad()``: operators record no graph at all
_recording = True


def _leads_to_stored(x: Tensor) -> bool:
    """Whether a gradient reaching ``x`` is ever yielded: ``x`` stores its gradient,
    or its creator kept its backward and leads to one that does."""
    if not x.requires_grad:
        return False
    if x.stores_grad:
        return True
    c = x.creator
    return c is not None and c.requires_grad and c.reaches_stored


def _route(s: tuple) -> tuple | None:
    """Where backward sends the gradient of one ``src`` entry: ``(creator, index,
    tensor or None)`` for an operator that kept its backward and leads to a stored
    gradient, ``(None, 0, tensor)`` for a tensor that stores its gradient and is a leaf
    for backward, None when the gradient is not needed."""
    c = s[0]
    if c is not None and c.requires_grad and c.reaches_stored:
        return s
    t = s[2]
    if t is not None and t.stores_grad and t.requires_grad:
        return (None, 0, t)
    return None


@contextlib.contextmanager
def no_grad() -> Iterator[None]:
    """Within this block no graph is recorded at all (no ``creator``, no ``src``) and
    ``autograd.training`` is False."""
    global _recording
    prev = _state.training, _recording
    _state.training = False
    _recording = False
    try:
        yield
    finally:
        _state.training, _recording = prev


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
    return adds.added(a, b)


class DonatingUpdate(functools.partial):
    """A recorded in-place update ``update(*arrays, donate=False)`` (a partial of the
    update function). With ``donate=True`` the caller hands over the last array (the
    gradient), which the update may then overwrite: graph replay passes it when that
    array is dead and held by nothing else."""


def _released(op: Operation) -> RuntimeError:
    return RuntimeError(
        f"backward through {type(op).__name__} whose graph was already released (an optimizer "
        "step, or backward(..., retain_graph=False), ran through it before); to walk a graph "
        "again, run autograd.backward on it (it keeps the graph) before the optimizer step"
    )


def _count_dependencies(root: Operation) -> tuple[dict, dict, dict, dict]:
    """For every operation reachable from ``root`` along edges that carry gradients:
    how many input edges consume it.

    Returns (op -> count, leaf tensor -> count, op -> {output index: tensor that
    stores its gradient}, op -> its inputs' routes, see :func:`_route`).
    """
    op_deps: dict = {}
    leaf_deps: dict = {}
    stored: dict = {}
    routes: dict = {}
    stack = [root]
    while stack:
        op = stack.pop()
        if op.src is None:
            raise _released(op)
        rs = routes[op] = [_route(s) for s in op.src]
        for r in rs:
            if r is None:
                continue
            creator, idx, t = r
            if creator is None:
                leaf_deps[t] = leaf_deps.get(t, 0) + 1
                continue
            op_deps[creator] = op_deps.get(creator, 0) + 1
            if t is not None and t.stores_grad:
                stored.setdefault(creator, {})[idx] = t
            if creator not in routes:
                routes[creator] = None  # seen; filled when popped
                stack.append(creator)
    return op_deps, leaf_deps, stored, routes


def _initial_grad(y: Tensor, dy: Any) -> Any:
    """The gradient array of ``y`` to start from (ones for a scalar ``y``)."""
    xp = y.device.xp
    if dy is None:
        if y.size() != 1:
            raise ValueError(f"backward: y has shape {y.shape}; pass dy for a non-scalar y")
        return xp.ones(y.shape, dtype=y.dtype)
    arr = dy.data if isinstance(dy, Tensor) else xp.asarray(dy, dtype=y.dtype)
    if arr.shape != y.shape:
        raise ValueError(f"backward: dy has shape {arr.shape}, y has shape {y.shape}")
    return arr


def _check_recorded(y: Tensor) -> None:
    """Raise when ``y`` has no graph that backward can walk."""
    c = y.creator
    if c is None:
        if not y.requires_grad:
            raise RuntimeError(
                "backward: y has no recorded graph; set autograd.training = True before computing it"
            )
        return
    if not c.requires_grad:
        raise RuntimeError(
            f"backward: y was computed by {type(c).__name__} without backward caches "
            "(autograd.training was False, e.g. after model.eval(), or no input required a "
            "gradient); set autograd.training = True (model.train()) before computing it"
        )
    if c.src is None:
        raise _released(c)


def _run_backward(op: Operation, dys: list, routes: list, dev: Any, release: bool) -> tuple:
    """The gradients of ``op``'s inputs from its outputs' gradients, computing only
    those with a route (that reach a tensor storing its gradient); with ``release``
    drops ``op``'s graph and caches."""
    if all(d is None for d in dys):
        dxs: tuple = (None,) * len(routes)
    else:
        op.needs_grad = tuple(r is not None for r in routes)
        if op.n_out > 1:
            xp = dev.xp
            dys = [xp.zeros(*m) if d is None else d for d, m in zip(dys, op.out_meta)]
        if dev.profiler is None:
            dxs = op._backward_arrays(*dys)
        else:  # SetVerbosity: time the kernel
            dxs = dev.profiler.run(op, op._backward_arrays, dys, "backward")
        if not isinstance(dxs, tuple):
            dxs = (dxs,)
        if dev.recorder is not None:
            dev.recorder.record(op._backward_arrays, list(dys), dxs, op=op, is_backward=True)
        if len(dxs) < len(routes):  # the trailing inputs (indices, targets) get none
            dxs += (None,) * (len(routes) - len(dxs))
    if release:
        op.src = None
        op.cache = None
    return dxs


class _Walk:
    """The state of one backward walk: pending output gradients per operator,
    pending leaf gradients, and the remaining consumer counts."""

    def __init__(self, root: Operation, y_index: int, dy: Any, dev: Any, release: bool):
        self.dev = dev
        self.release = release
        self.op_deps, self.leaf_deps, self.stored, self.routes = _count_dependencies(root)
        self.grads: dict = {root: [None] * root.n_out}
        self.grads[root][y_index] = dy
        self.leaf_grads: dict = {}
        self.ready = [root]

    def stored_outputs(self, op: Operation, dys: list) -> list[tuple[Tensor, Tensor]]:
        """The gradients of ``op``'s outputs that store theirs."""
        return [
            (t, Tensor.wrap(dys[idx], self.dev))
            for idx, t in self.stored.pop(op).items()
            if dys[idx] is not None
        ]

    def to_leaf(self, t: Tensor, dx: Any) -> tuple[Tensor, Tensor] | None:
        """Add ``dx`` to leaf ``t``; its gradient once every contribution is in."""
        if dx is not None:
            self.leaf_grads[t] = _accumulate(self.dev, self.leaf_grads.get(t), dx)
        self.leaf_deps[t] -= 1
        if self.leaf_deps[t] == 0:
            g = self.leaf_grads.pop(t, None)
            if g is not None:
                return t, Tensor.wrap(g, self.dev)
        return None

    def to_op(self, creator: Operation, idx: int, dx: Any) -> None:
        """Add ``dx`` to output ``idx`` of ``creator``; queue it once complete."""
        slot = self.grads.get(creator)
        if slot is None:
            slot = self.grads[creator] = [None] * creator.n_out
        if dx is not None:
            slot[idx] = _accumulate(self.dev, slot[idx], dx)
        self.op_deps[creator] -= 1
        if self.op_deps[creator] == 0:
            self.ready.append(creator)

    def run(self) -> Iterator[tuple[Tensor, Tensor]]:
        """Process ready operators until none is left."""
        while self.ready:
            op = self.ready.pop()
            dys = self.grads.pop(op)
            if op in self.stored:
                yield from self.stored_outputs(op, dys)
            routes = self.routes.pop(op)
            dxs = _run_backward(op, dys, routes, self.dev, self.release)
            for r, dx in zip(routes, dxs):
                if r is None:
                    continue
                creator, idx, t = r
                if creator is None:
                    done = self.to_leaf(t, dx)
                    if done is not None:
                        yield done
                else:
                    self.to_op(creator, idx, dx)


def backward(y: Tensor, dy: Any = None, retain_graph: bool = True) -> Iterator[tuple[Tensor, Tensor]]:
    """Back-propagate from ``y``; yield ``(tensor, gradient)`` for every tensor that
    stores its gradient, once, as soon as all contributions to it are summed.

    Args:
        y: the tensor to differentiate (usually a scalar loss).
        dy: the gradient of ``y``; required when ``y`` has more than one element.
        retain_graph: keep the graph and its backward caches after the walk (the
            default, as SINGA does: the graph lives as long as ``y`` and its other
            outputs do, and can be walked again); False releases each operator's graph
            as the walk passes it, so memory is freed at once and a second walk raises.
            The optimizers' steps (``opt(loss)``, ``backward_and_update``) walk with
            False: a step is the last use of its graph.

    Only gradients that reach a tensor storing its gradient are computed (an input
    batch requires a gradient by default, as in SINGA, yet none is computed for it).
    A second walk computes from what the forward pass recorded: the saved activations,
    and parameters as they are now where an operator kept the parameter's array itself
    (an in-place update in between is seen, as in SINGA).

    Example::

        for p, g in autograd.backward(loss):
            sgd.update(p, g)
    """
    dy_arr = _initial_grad(y, dy)
    _check_recorded(y)
    if y.stores_grad:
        yield y, Tensor.wrap(dy_arr, y.device)
    root = y.creator
    if root is None or not root.reaches_stored:
        return
    yield from _Walk(root, y._index, dy_arr, y.device, not retain_graph).run()


class Gradients(dict):
    """What :func:`gradients` returns: ``{id(tensor): gradient}`` as in SINGA, which
    can also be indexed by the tensor itself (``grads[w]`` is ``grads[id(w)]``)."""

    def __getitem__(self, key: Any) -> Tensor:
        return super().__getitem__(id(key) if isinstance(key, Tensor) else key)

    def __contains__(self, key: Any) -> bool:
        return super().__contains__(id(key) if isinstance(key, Tensor) else key)

    def get(self, key: Any, default: Any = None) -> Any:
        """The gradient of ``key`` (a tensor or its id), or ``default``."""
        return super().get(id(key) if isinstance(key, Tensor) else key, default)


def gradients(y: Tensor, dy: Any = None, retain_graph: bool = True) -> Gradients:
    """All gradients of ``y`` (see :func:`backward`, which keeps the graph unless
    ``retain_graph`` is False), keyed by ``id(tensor)`` as in SINGA; the result can be
    indexed by the tensor too."""
    return Gradients((id(p), g) for p, g in backward(y, dy, retain_graph))


def check_same_dtype(opname: str, *tensors: Tensor, floating: bool = False) -> None:
    """Raise ValueError naming ``opname`` and the dtypes when the tensors' dtypes differ
    (or, with ``floating``, are not floating point), before anything runs."""
    dtypes = [t.dtype for t in tensors if t is not None]
    if any(d != dtypes[0] for d in dtypes) or (floating and dtypes[0].kind != "f"):
        names = " and ".join(str(d) for d in dtypes)
        need = "floating-point inputs of one dtype" if floating else "inputs of one dtype"
        raise ValueError(f"{opname}: needs {need}, got {names}")


_BLAS_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def unbroadcast(g: Any, shape: tuple) -> Any:
    """Sum a broadcast gradient ``g`` back down to ``shape``. A sum over leading axes
    only (a bias's gradient) of a float numpy array is one BLAS product with a vector of
    ones: numpy's ``sum(axis=0)`` of a tall array runs several times slower."""
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        i + lead for i, n in enumerate(shape) if n == 1 and g.shape[i + lead] != 1
    )
    if lead and len(axes) == lead and type(g) is np.ndarray and g.dtype in _BLAS_FLOATS:
        rows = g.reshape(-1, math.prod(shape))
        return (np.ones(rows.shape[0], g.dtype) @ rows).reshape(shape)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g.reshape(shape)
